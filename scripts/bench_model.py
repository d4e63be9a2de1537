"""Benchmark (d): a whole-model sweep against the model's own first iteration.

Runs the model command as a user would (a subprocess, results store off) on one GPU and,
side by side in the same run:

* the sweep's wall time, and its ratio to PyTorch's own first iteration with benchmark on
  (from the sweep's own run of the model): the figure to drive down;
* where the rest of the wall time went: before PyTorch's run of the model (the
  interpreter, the imports and the capture: until the command first says it runs the
  model) and after the problems (the report, the sweep file, the process's end);
* the tool's own part: the wall time less PyTorch's run of the model, whose benchmark
  mode's search varies between machines of one kind, and so how long that run may take
  for the sweep to fit 60 s;
* the GPU memory the tool used at its peak (the device's used memory, sampled every 20 ms
  from this process, less what was used before it started), against the model's own
  training-step peak (reserved, benchmark mode) plus 2 GiB.

Usage: python scripts/bench_model.py [--model resnet50] [--batch 32] [--amp fp16]
           [--no-channels-last] [--profile quick] [--json PATH] [--sweep-json PATH]
Goals (docs/benchmarks.md): sweep wall time <= 60 s (stretch: <= 3x PyTorch's own first
iteration with benchmark on); tool peak <= model peak + 2 GiB.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GIB = 2**30
# what the model command's progress says when PyTorch's run of the model begins
# (model/pytorch_run.py: "PyTorch's run of the model: <mode>")
RUN_MARK = b"PyTorch's run of the model"


def marked_run(cmd, mark: bytes, t0: float):
    """Run ``cmd``, its standard error passed through as it comes; (exit status, seconds
    from ``t0`` (perf_counter) to the first time ``mark`` appeared there, or None)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE)
    seen = None
    tail = b""
    out = getattr(sys.stderr, "buffer", None)
    for chunk in iter(lambda: proc.stderr.read1(4096), b""):
        if seen is None and mark in tail[-len(mark):] + chunk:
            seen = time.perf_counter() - t0
        tail = chunk
        if out is not None:
            out.write(chunk)
            out.flush()
    return proc.wait(), seen


def rest_text(figures: dict) -> str:
    """rest_of's figures, said."""
    if figures["before_pytorch_run_s"] is None:
        return "the start of PyTorch's run not seen in its progress"
    return (f"before PyTorch's run {figures['before_pytorch_run_s']} s, after the problems "
            f"{figures['after_problems_s']} s")


def own_part_s(wall: float, pytorch_run: float) -> float:
    """The sweep's wall time less PyTorch's own run of the model (s): what the tool
    itself spends (the imports, the capture, the problems, the report). PyTorch's run
    (its benchmark mode's search above all) took 19.8-25.5 s on fresh machines of one kind
    (docs/benchmarks.md), which this figure leaves out."""
    return round(max(wall - pytorch_run, 0.0), 1)


def rest_of(wall: float, before_run, pytorch_run: float, problems: float) -> dict:
    """The wall time outside PyTorch's run and the problems (s): before the run (None
    where it was not seen) and after the problems (the rest after those)."""
    if before_run is None:
        return {"before_pytorch_run_s": None, "after_problems_s": None}
    return {"before_pytorch_run_s": round(before_run, 1),
            "after_problems_s": round(max(wall - before_run - pytorch_run - problems, 0.0), 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                    help="contiguous layout (default: channels_last)")
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the figures here")
    ap.add_argument("--sweep-json", default=None, help="keep the sweep file here")
    a = ap.parse_args()
    import torch

    torch.cuda.set_device(a.device)
    free0, total = torch.cuda.mem_get_info()
    used0 = total - free0
    peak = [used0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            free, _ = torch.cuda.mem_get_info()
            peak[0] = max(peak[0], total - free)
            time.sleep(0.02)

    out = a.sweep_json or os.path.join(tempfile.mkdtemp(prefix="bench_model_"), "sweep.json")
    cmd = [sys.executable, "-m", "cudnn_explorer", "model", a.model, "--batch", a.batch,
           "--amp", a.amp, "--profile", a.profile, "--device", str(a.device), "--no-store",
           "--verbose", "--json", out] + (["--channels-last"] if a.channels_last else [])
    print("$ " + " ".join(cmd[1:]), flush=True)
    t = threading.Thread(target=sample, daemon=True)
    t.start()
    t0 = time.perf_counter()
    # Its output and progress pass straight through: a run cut short still shows how far
    # it got (and the sweep file holds every problem finished).
    sys.stdout.flush()
    rc, before_run = marked_run(cmd, RUN_MARK, t0)
    wall = time.perf_counter() - t0
    stop.set()
    t.join()
    if rc != 0:
        print(f"the model command exited {rc}")
        return 1
    from cudnn_explorer.core.sweep import ModelSweep

    with open(out) as f:
        sw = ModelSweep.from_json(f.read())
    run = sw.pytorch_run
    bench = run.mode("benchmark") if run else None
    if bench is None:
        print("no benchmark-mode run of the model in the sweep: cannot compare")
        return 1
    s = bench.sizes[0]
    pytorch_s = sum(m.wall_s or 0.0 for m in run.modes)
    model_peak = max(s.first_peak_reserved_bytes, s.steady_peak_reserved_bytes or 0)
    tool_peak = peak[0] - used0
    figures = {
        "command": " ".join(cmd[1:]), "gpu": sw.environment.gpu_name,
        "cudnn": sw.environment.cudnn_runtime, "torch": sw.environment.torch_version,
        "unique_problems": len(sw.capture.problems), "sweep_wall_s": round(wall, 1),
        # the command's parts: PyTorch's own run of the model (every mode, a fresh process
        # each), then the sweep of the unique problems
        "pytorch_run_s": round(pytorch_s, 1),
        "problems_s": round(sw.wall_s or 0.0, 1),
        # the rest: before PyTorch's run (the interpreter, imports, the capture; None where
        # the command never said it began) and after the problems (the report and its end)
        **rest_of(wall, before_run, pytorch_s, sw.wall_s or 0.0),
        # where the problems' time went, summed over their directions (core/walltime.py)
        "problems_breakdown_s": breakdown(sw),
        "pytorch_first_iteration_ms": round(s.first_ms, 1),
        "ratio_sweep_to_first_iteration": round(wall * 1e3 / s.first_ms, 1),
        "tool_peak_gpu_bytes": tool_peak, "model_peak_reserved_bytes": model_peak,
        "memory_goal_met": tool_peak <= model_peak + 2 * GIB, "time_goal_met": wall <= 60,
        "stretch_goal_met": wall * 1e3 <= 3 * s.first_ms}
    figures["tool_part_s"] = own_part_s(wall, pytorch_s)
    print(f"\nsweep of {len(sw.capture.problems)} unique problems ({a.profile} profile): "
          f"{wall:.1f} s wall (PyTorch's run of the model {figures['pytorch_run_s']} s, "
          f"the problems {figures['problems_s']} s, {rest_text(figures)}); PyTorch's own "
          f"first iteration with benchmark on: {s.first_ms:.0f} ms; "
          f"ratio {figures['ratio_sweep_to_first_iteration']}x "
          f"(goal: sweep <= 60 s: {'met' if figures['time_goal_met'] else 'NOT met'}; "
          f"stretch <= 3x: {'met' if figures['stretch_goal_met'] else 'NOT met'})")
    print(f"the tool's own part (all but PyTorch's run of the model, which varies between "
          f"machines of one kind): {figures['tool_part_s']} s; with PyTorch's run the "
          f"sweep fits 60 s while that run takes at most "
          f"{max(60.0 - figures['tool_part_s'], 0.0):.1f} s")
    print(f"GPU memory: the tool's peak {tool_peak / GIB:.2f} GiB (device used, less "
          f"{used0 / GIB:.2f} GiB before) vs the model's own peak reserved "
          f"{model_peak / GIB:.2f} GiB + 2 GiB (goal "
          f"{'met' if figures['memory_goal_met'] else 'NOT met'})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


def breakdown(sw) -> dict:
    """The sweep's problems' wall time by part (s), and where their engine configs left."""
    from cudnn_explorer.core.walltime import sweep_search_time

    t, _ = sweep_search_time(sw.entries)
    r = (lambda v: None if v is None else round(v, 1))
    return {"legacy_rows": r(t.legacy_s), "find": r(t.find_s), "engine_configs": r(t.engines_s),
            "plan_builds": r(t.builds_s), "listed_and_built_ahead": r(t.ahead_s),
            **{name: r(v) for name, v in t.rounds},
            "legacy_rounds": {name: r(v) for name, v in t.legacy_rounds},
            "legacy_tensors_and_reference": r(t.setup_s), "legacy_checks": r(t.legacy_checks_s),
            "engine_checks": r(t.engine_checks_s),
            "configs": t.configs, "left": dict(t.left)}


if __name__ == "__main__":
    sys.exit(main())
