"""After one record and one tune, what share of a training script's convolution calls
run pinned with no change to its code, how do its first step, steady step, memory and
loss compare with benchmark mode on and off, and what does recording it cost?

``python -m benchmarks.zero_code [--configs eager,compiled] [--repeats 3] [--steps 48]``:
the script is benchmarks/train_example.py (a model built in the script, input sizes
varying per step, AMP bf16, channels_last, a gradient penalty every fourth step; the
"compiled" config compiles the model for the main loss). Per config, once: ``record``
runs it (timed: "record"), then ``tune`` explores what it recorded (timed, one GPU, its
own results store shared by the configs, as a user's default store would be). Then per
config and repeat, in turns, each in a fresh process with empty CUDA and Inductor
caches: the script with ``--cudnn-benchmark`` (benchmark on), without (off), under
``run --plans`` (pinned: the share of calls pinned from its report; plans built ahead,
none kept between runs, so that every repeat starts alike), and under ``record``
(recorded: its steady step over off's is the recording's cost). The script times its own
steps (synchronised); the loss figure is the largest relative difference of a step's
loss from benchmark off's in the same repeat.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
MODES = ("benchmark on", "benchmark off", "pinned", "recorded")
CONFIGS = {"eager": (), "compiled": ("--compile",)}
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_example.py")
FIGURES = [Figure("coverage_pct", "convolution calls that ran pinned", "%", better="higher"),
           Figure("first_step_s", "first step", "s"),
           Figure("first_step_peak_gib", "first step's peak GPU memory (allocated)", "GiB"),
           Figure("steady_step_ms", "steady step (median of the second half)", "ms"),
           Figure("loss_vs_off", "loss: largest relative difference from benchmark off",
                  "ratio", better=""),
           Figure("wall_s", "start to end (pinned, recorded: the verb's process and the script's)",
                  "s"),
           Figure("record_s", "record: the recorded run that tune read", "s", better=""),
           Figure("tune_s", "tune, one GPU", "s", better="")]
BENCH = harness.Benchmark("zero_code", QUESTION, FIGURES, baseline="benchmark off")


def script_argv(a, config, out) -> list:
    return [SCRIPT, "--steps", str(a.steps), "--amp", "bf16", "--channels-last",
            *CONFIGS[config], "--out", out]


def read_run(path: str, wall_s: float) -> dict:
    """A run's figures: the script's own (its losses as loss_0, loss_1, ...) and, beside
    a pinned run's, the share of calls pinned from its report (``{out}.report``)."""
    from cudnn_explorer.core.zero_code import RunReport

    with open(path) as f:
        d = json.load(f)
    figures = {k: float(d[k]) for k in ("first_step_s", "first_step_peak_gib",
                                        "steady_step_ms")}
    figures.update((f"loss_{i}", float(v)) for i, v in enumerate(d["losses"]))
    if os.path.exists(path + ".report"):
        with open(path + ".report") as f:
            counts = RunReport.read(f.read()).counts
        figures["coverage_pct"] = 100.0 * counts.pinned_calls / max(counts.calls, 1)
    return figures


def loss_differences(samples) -> None:
    """Each run's largest relative difference of a step's loss from benchmark off's run of
    the same row and repeat, as ``loss_vs_off`` (benchmark off's own is left out)."""
    for (row, mode), runs in samples.items():
        if mode == "benchmark off":
            continue
        offs = {off.get("repeat", i): off
                for i, off in enumerate(samples.get((row, "benchmark off"), []))}
        for i, run in enumerate(runs):
            off = offs.get(run.get("repeat", i))
            if off is None:
                continue
            steps = [k for k in run if k.startswith("loss_") and k in off]
            if steps:
                run["loss_vs_off"] = max(abs(run[k] - off[k]) / max(abs(off[k]), 1e-12)
                                         for k in steps)


def setup(a, config, work, store) -> dict:
    """Record the script, then tune what it recorded: the plan file's path and the
    figures (record_s, tune_s); exits the benchmark where either fails."""
    convs, plans = (os.path.join(work, f"{config}.{n}.json") for n in ("convs", "plans"))
    out = os.path.join(work, f"{config}.record.out.json")
    cli = [sys.executable, "-m", "cudnn_explorer"]
    t0 = time.perf_counter()
    r = subprocess.run(cli + ["record", "-o", convs, "--", sys.executable,
                              *script_argv(a, config, out)], stdout=sys.stderr)
    record_s = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"zero_code: record of the {config} script failed (exit {r.returncode})")
    t0 = time.perf_counter()
    r = subprocess.run(cli + ["tune", convs, "-o", plans, "--store", store], stdout=sys.stderr)
    tune_s = time.perf_counter() - t0
    if r.returncode != 0 and not os.path.exists(plans):
        raise SystemExit(f"zero_code: tune of the {config} record failed (exit {r.returncode})")
    return {"plans": plans, "record_s": record_s, "tune_s": tune_s}


def cases(a, plans) -> list:
    """Per config, each mode's run of the script in a fresh process with empty caches."""
    out = []
    env = (("CUDA_CACHE_PATH", "{tmp}/cuda"), ("TORCHINDUCTOR_CACHE_DIR", "{tmp}/inductor"))
    for config in a.configs:
        script = script_argv(a, config, "{out}")
        argv = {"benchmark on": (*script, "--cudnn-benchmark"), "benchmark off": tuple(script),
                # --no-keep: every repeat builds its plans ahead, as a first run does (a
                # kept plan file would make the first repeat differ from the others;
                # benchmarks.cold_start measures kept plans)
                "pinned": ("-m", "cudnn_explorer", "run", "--plans", plans[config], "--no-keep",
                           "--report", "{out}.report", "--", sys.executable, *script),
                # the recording's cost: the script recorded again, in turns with the others,
                # so that its steady step has benchmark off's beside it in every repeat
                "recorded": ("-m", "cudnn_explorer", "record", "-o", "{tmp}/convs.json", "--",
                             sys.executable, *script)}
        for mode in MODES:
            out.append(Case(config, mode, argv[mode], env=env, timeout_s=600, read=read_run))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/zero_code.json", repeats=3)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help=f"comma-separated, of: {', '.join(CONFIGS)}")
    ap.add_argument("--steps", type=int, default=48,
                    help="the script's steps (default 48: the steady step is the median of 24)")
    a = ap.parse_args(argv)
    a.configs = harness.listed(ap, a.configs, "--configs", CONFIGS)
    if a.steps < 2:
        ap.error(f"--steps {a.steps}: valid: 2 or more")
    return a


def main(argv=None, runner=harness.run_process, env=None, set_up=setup) -> int:
    a = parse(argv)
    work = tempfile.mkdtemp(prefix="zero_code_")
    store = os.path.join(work, "results.db")
    try:
        made = {config: set_up(a, config, work, store) for config in a.configs}
    except KeyboardInterrupt:  # nothing measured yet: nothing to write
        print("zero_code: interrupted while recording and tuning; nothing written",
              file=sys.stderr)
        return 130

    def after(samples):
        loss_differences(samples)
        for config, m in made.items():
            for run in samples.get((config, "pinned"), []):
                run.update((k, m[k]) for k in ("record_s", "tune_s"))

    notes = [f"script: benchmarks/train_example.py --steps {a.steps} --amp bf16 "
             "--channels-last (sizes 48, 64, 96; a gradient penalty every 4th step)",
             "caches: empty CUDA JIT and Inductor caches in every process"]
    return BENCH.run(cases(a, {c: m["plans"] for c, m in made.items()}), a, runner, env,
                     notes=notes, after=after)


if __name__ == "__main__":
    sys.exit(main())
