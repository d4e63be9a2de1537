"""Does a model pinned to a plan file train as fast as benchmark mode on and off: its
first iteration, its steady step and its first peak reserved memory?

``python -m benchmarks.pinned_step [--plans FILE] [--model resnet50] [--batch 32]
[--amp fp16] [--no-channels-last] [--eval] [--repeats 3]``: without ``--plans``, first the
model's sweep and its plan file, as a user makes them (``python -m cudnn_explorer model
... --no-store --json SWEEP``, ``plans write SWEEP -o FILE``). Then every mode in fresh
processes, in turns: benchmark off, benchmark on, and pinned (``cudnn_explorer.pin``).
Each process builds the model, times its first iteration (synchronised), then
``--steps`` eager steps after 5 of warm-up between CUDA events (their median). Goals
(docs/pinning.md): the pinned step at most the faster of on and off; the pinned first
iteration at most off's plus the plan builds; the pinned peak reserved at most off's + 5%.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
MODES = ("off", "on", "pinned")
FIGURES = [Figure("first_ms", "first iteration", "ms"),
           Figure("step_ms", "steady step, eager median", "ms"),
           Figure("reserved_mib", "first peak reserved", "MiB")]
BENCH = harness.Benchmark("pinned_step", QUESTION, FIGURES, baseline="off")


def model_args(a) -> list:
    return [a.model, "--batch", str(a.batch), "--amp", a.amp] + \
        (["--channels-last"] if a.channels_last else []) + (["--eval"] if a.eval else [])


def plan_file(a) -> str:
    """The model's sweep and plan file, as a user makes them; the plan file's path."""
    folder = tempfile.mkdtemp(prefix="bench_pinned_")
    sweep, plans = os.path.join(folder, "sweep.json"), os.path.join(folder, "plans.json")
    for cmd in (["model", *model_args(a), "--no-store", "--json", sweep],
                ["plans", "write", sweep, "-o", plans]):
        subprocess.run([sys.executable, "-m", "cudnn_explorer", *cmd], check=True,
                       stdout=sys.stderr)
    return plans


def child(a) -> int:
    """One mode's process: the figures of FIGURES to ``--out``."""
    import torch
    import torchvision

    import cudnn_explorer

    torch.backends.cudnn.benchmark = a.child == "on"
    model = torchvision.models.get_model(a.model, weights=None).cuda()
    x = torch.randn(a.batch, 3, 224, 224, device="cuda")
    if a.channels_last:
        model, x = model.to(memory_format=torch.channels_last), \
            x.contiguous(memory_format=torch.channels_last)
    model.train(not a.eval)
    if a.child == "pinned":
        cudnn_explorer.pin(model, a.plans, keep=False)  # each process cold (cold_start: kept)
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)

    def step():
        with torch.autocast("cuda", dtype=dtype or torch.float32, enabled=dtype is not None):
            if a.eval:
                with torch.no_grad():
                    model(x)
                return
            out = model(x)
        out.float().sum().backward()

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    figures = {"first_ms": (time.perf_counter() - t0) * 1e3,
               "reserved_mib": torch.cuda.max_memory_reserved() / 2**20}
    for _ in range(5):
        step()
    times = []
    for _ in range(a.steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    figures["step_ms"] = statistics.median(times)
    with open(a.out, "w") as f:
        json.dump(figures, f)
    return 0


def cases(a, plans: str) -> list:
    row = " ".join(model_args(a))
    common = ["--model", a.model, "--batch", str(a.batch), "--amp", a.amp, "--steps",
              str(a.steps), "--plans", plans, "--out", "{out}"]
    common += ([] if a.channels_last else ["--no-channels-last"]) + (["--eval"] if a.eval else [])
    return [Case(row, m, harness.module_argv(__spec__.name, "--child", m, *common))
            for m in MODES]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/pinned_step.json", repeats=3)
    ap.add_argument("--plans", default=None, help="the plan file (default: swept here)")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--amp", default="fp16", help="fp16 | bf16 | off")
    ap.add_argument("--channels-last", action="store_true", default=True,
                    help="channels_last (the default)")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    ap.add_argument("--eval", action="store_true", help="inference: forward only")
    ap.add_argument("--steps", type=int, default=20, help="timed steady steps (default 20)")
    harness.child_args(ap, MODES)
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.child:
        return child(a)
    plans = a.plans or plan_file(a)
    return BENCH.run(cases(a, plans), a, runner, env)


if __name__ == "__main__":
    sys.exit(main())
