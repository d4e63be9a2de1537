"""How long does the main job take, the default problem with all three directions and
the quick profile, from the process's start to its end, with an empty CUDA JIT cache (a
machine that never compiled these kernels) and with a warm one?

``python -m benchmarks.main_job [--repeats 3] [--json data/benchmarks/main_job.json]``
runs ``python -m cudnn_explorer --shape 32,3,224,224 --kernel 3 --no-store --json FILE``
as a user would, each run a fresh process; "cold" gives every run an empty
``CUDA_CACHE_PATH``, "warm" the default cache after one round of warm-up. Goal: at most
30 s cold (stretch 15 s).
"""
import argparse
import json
import sys

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
PROBLEM = ("--shape", "32,3,224,224", "--kernel", "3")
FIGURES = [Figure("wall_s", "the process, start to end", "s"),
           Figure("report_wall_s", "the exploration (the report's wall time)", "s"),
           Figure("pytorch_wall_s", "PyTorch's children", "s")]
BENCH = harness.Benchmark("main_job", QUESTION, FIGURES, baseline="cold")


def report_times(path: str, wall_s: float) -> dict:
    """The exploration file's own times (s)."""
    with open(path) as f:
        doc = json.load(f)
    return {k2: float(doc[k]) for k, k2 in (("wall_s", "report_wall_s"),
                                            ("pytorch_wall_s", "pytorch_wall_s"))
            if isinstance(doc.get(k), (int, float))}


def cases(args) -> list:
    job = harness.module_argv("cudnn_explorer", *PROBLEM, *args.extra, "--no-store",
                              "--quiet", "--json", "{out}")
    row = " ".join(PROBLEM + tuple(args.extra))
    return [Case(row, "cold", job, env=(("CUDA_CACHE_PATH", "{tmp}"),), read=report_times),
            Case(row, "warm", job, read=report_times)]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/main_job.json", repeats=3)
    ap.add_argument("extra", nargs="*", help="more arguments of the main job (after --)")
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    return BENCH.run(cases(a), a, runner, env, warmup=1)


if __name__ == "__main__":
    sys.exit(main())
