"""Does the quick profile (a staged search) find the engine configs the thorough profile
(every candidate timed in full) finds, and how far do the answers move between runs?

``python -m benchmarks.search [--problems default,fp32-tf32,...] [--repeats 2]`` explores
each problem with ``--profile quick`` and ``--profile thorough`` as a user would
(``python -m cudnn_explorer ... --no-store --json FILE``), each exploration a fresh
process with an empty CUDA JIT cache, the two profiles in turns. Per direction: the best
config's median (ms) under each profile, its spread over the repeats (repeatability),
and "quick's best in thorough": the thorough run's median of the config the quick run
ranked best, over the thorough run's best (1.000: the same answer; the same repeat's two
runs paired). Goal: at most 1.02 in at least 95% of 40 or more problem-directions.
"""
import argparse
import json
import sys

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
DIRECTIONS = ("fwd", "bwd-data", "bwd-filter")
# name -> the problem's arguments of the main command
PROBLEMS = {
    "default": "--shape 32,3,224,224 --kernel 3",
    "fp32-tf32": "--shape 16,64,56,56 --out-channels 64 --kernel 3",
    "fp32-no-tf32": "--shape 16,64,56,56 --out-channels 64 --kernel 3 --tf32 off",
    "r50-3x3-fp16-nhwc": "--shape 32,128,28,28 --out-channels 128 --kernel 3 --dtype float16 "
                         "--layout nhwc",
    "r50-1x1-fp16-nhwc": "--shape 32,256,56,56 --out-channels 64 --kernel 1 --padding 0 "
                         "--dtype float16 --layout nhwc",
    "depthwise-fp16-nhwc": "--shape 32,64,56,56 --out-channels 64 --groups 64 --kernel 3 "
                           "--dtype float16 --layout nhwc",
    "3d-fp16-nhwc": "--shape 4,32,16,32,32 --out-channels 32 --kernel 3 --dtype float16 "
                    "--layout nhwc",
    "bf16-1x1-s2-nhwc": "--shape 32,512,28,28 --out-channels 1024 --kernel 1 --stride 2 "
                        "--padding 0 --dtype bfloat16 --layout nhwc",
    "readme-bf16-nhwc": "--shape 32,64,56,56 --kernel 3 --dtype bfloat16 --layout nhwc",
}
FIGURES = [Figure("wall_s", "the exploration's process", "s")] + \
    [Figure(f"best_ms_{d}", f"{d}: the best config's median", "ms") for d in DIRECTIONS] + \
    [Figure(f"quick_in_thorough_{d}", f"{d}: quick's best in thorough", "x")
     for d in DIRECTIONS]
BENCH = harness.Benchmark("search", QUESTION, FIGURES, baseline="thorough")


def timed_configs(path: str, wall_s: float) -> dict:
    """Per direction of a saved exploration: every engine config timed in full (tag ->
    median ms, under ``_medians_DIR``), and the best one's median (``best_ms_DIR``)."""
    with open(path) as f:
        doc = json.load(f)
    out = {}
    for d in doc.get("directions", []):
        medians = {c["tag"]: c["timing"]["median_ms"]
                   for c in (d.get("engines") or {}).get("configs", [])
                   if c.get("status") == "OK" and c.get("allowed", True)
                   and c.get("left_round") is None and c.get("timing")}
        if medians:
            out[f"_medians_{d['direction']}"] = medians
            out[f"best_ms_{d['direction']}"] = min(medians.values())
    return out


def pair(samples) -> None:
    """Add to each quick run ``quick_in_thorough_DIR``: the same repeat's thorough run's
    median of quick's best config over thorough's best (no figure where thorough did not
    time that config)."""
    rows = {row for row, _ in samples}
    for row in rows:
        for quick, thorough in zip(samples.get((row, "quick"), []),
                                   samples.get((row, "thorough"), [])):
            for d in DIRECTIONS:
                q, t = quick.get(f"_medians_{d}"), thorough.get(f"_medians_{d}")
                if not q or not t:
                    continue
                pick = min(q, key=q.get)
                if pick in t:
                    quick[f"quick_in_thorough_{d}"] = t[pick] / min(t.values())


def cases(a) -> list:
    out = []
    for name in a.problems.split(","):
        if name not in PROBLEMS:
            raise SystemExit(f"--problems: {name!r}: valid: {', '.join(PROBLEMS)}")
        for profile in ("quick", "thorough"):
            out.append(Case(name, profile, harness.module_argv(
                "cudnn_explorer", *PROBLEMS[name].split(), "--profile", profile, "--no-store",
                "--quiet", "--json", "{out}"), env=(("CUDA_CACHE_PATH", "{tmp}"),),
                read=timed_configs))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/search.json", repeats=2)
    ap.add_argument("--problems", default="default,fp32-tf32,depthwise-fp16-nhwc",
                    help=f"comma-separated, of: {', '.join(PROBLEMS)}")
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    return BENCH.run(cases(a), a, runner, env, after=pair)


if __name__ == "__main__":
    sys.exit(main())
