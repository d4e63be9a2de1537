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

With ``--ahead-ab N``, after that first sweep (which warms the CUDA JIT cache), N pairs
of sweeps on the same GPU, one with the first mode's process set up ahead of its turn (the
tool as it is; Note [first mode set up ahead] in cudnn_explorer/jobs/sweep.py) and one
without (its setup in its turn, as before that note), the order alternating from pair to
pair: each pair's difference in the time before PyTorch's run, PyTorch's run and the
whole sweep, and their medians. It answers whether the setup beside the capture slows the
capture more than it saves.

Usage: python scripts/bench_model.py [--model resnet50] [--batch 32] [--amp fp16]
           [--no-channels-last] [--profile quick] [--json PATH] [--sweep-json PATH]
           [--ahead-ab N]
Goals (docs/benchmarks.md): sweep wall time <= 60 s (stretch: <= 3x PyTorch's own first
iteration with benchmark on); tool peak <= model peak + 2 GiB.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GIB = 2**30
# what the model command's progress says when PyTorch's run of the model begins
# (model/run_modes.py: "PyTorch's run of the model: <mode>")
RUN_MARK = b"PyTorch's run of the model"
# The model command with the first mode's process set up in its turn, not ahead of it: the
# job's set_up_ahead replaced by one that sets nothing up (it then reads False, as where
# too little GPU memory is free), the rest of the command as it is.
AHEAD_OFF = ("import sys; from cudnn_explorer.jobs import sweep; "
             "sweep.set_up_ahead = lambda *args, **kw: False; "
             "from cudnn_explorer.cli.main import main; sys.exit(main(sys.argv[1:]))")


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
    (its benchmark mode's search above all) varies between fresh machines of one kind
    (docs/benchmarks.md), and this figure leaves it out."""
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
    ap.add_argument("--ahead-ab", type=int, default=0, metavar="N",
                    help="then N pairs of sweeps with the first mode set up ahead of its "
                         "turn and without, side by side (default 0: none)")
    a = ap.parse_args()
    if a.ahead_ab < 0:
        ap.error(f"--ahead-ab {a.ahead_ab}: valid: 0 or more pairs")
    out = a.sweep_json or os.path.join(tempfile.mkdtemp(prefix="bench_model_"), "sweep.json")
    cmd = command(a, out, ahead=True)
    print("$ " + " ".join(cmd[1:]), flush=True)
    rc, wall, before_run, used0, tool_peak = timed_sweep(cmd, a.device)
    if rc != 0:
        print(f"the model command exited {rc}")
        return 1
    from cudnn_explorer.core.model_sweep import ModelSweep

    with open(out) as f:
        sw = ModelSweep.from_json(f.read())
    run = sw.pytorch_run
    bench = run.mode("benchmark") if run else None
    if bench is None:
        print("no benchmark-mode run of the model in the sweep: cannot compare")
        return 1
    s = bench.sizes[0]
    pytorch_s = pytorch_run_s(run)
    model_peak = max(s.first_peak_reserved_bytes, s.steady_peak_reserved_bytes or 0)
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
    if a.ahead_ab:
        figures["ahead_ab"] = ahead_ab(a, a.ahead_ab)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0


def command(a, out: str, ahead: bool) -> list:
    """The model command of ``a``'s arguments, its sweep file ``out``; ``ahead`` False:
    the first mode's process set up in its turn (AHEAD_OFF)."""
    head = [sys.executable] + (["-m", "cudnn_explorer"] if ahead else ["-c", AHEAD_OFF])
    return head + ["model", a.model, "--batch", a.batch, "--amp", a.amp, "--profile",
                   a.profile, "--device", str(a.device), "--no-store", "--verbose",
                   "--json", out] + (["--channels-last"] if a.channels_last else [])


def timed_sweep(cmd, device: int):
    """Run the model command ``cmd`` with the device's used memory sampled every 20 ms:
    (exit status, wall s, s until PyTorch's run began or None, the device's used bytes
    before, the tool's peak above that)."""
    import torch

    torch.cuda.set_device(device)
    free0, total = torch.cuda.mem_get_info()
    used0 = total - free0
    peak = [used0]
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            free, _ = torch.cuda.mem_get_info()
            peak[0] = max(peak[0], total - free)
            time.sleep(0.02)

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
    return rc, wall, before_run, used0, peak[0] - used0


def pytorch_run_s(run) -> float:
    """PyTorch's run of the model (a ModelRun): its modes' wall times summed (s)."""
    return sum(m.wall_s or 0.0 for m in run.modes)


def ab_figures(wall: float, before_run, sw) -> dict:
    """One sweep of the A/B: its wall time, the time before PyTorch's run, PyTorch's run
    (every mode), the problems, and the first mode's setup ahead of its turn and wait at
    it (s)."""
    from cudnn_explorer.core.model_run import AHEAD

    run = sw.pytorch_run
    first = run.modes[0] if run and run.modes else None
    phases = first.phases_s if first else {}
    r = (lambda v: None if v is None else round(v, 2))
    return {"sweep_s": r(wall), "before_pytorch_run_s": r(before_run),
            "pytorch_run_s": r(pytorch_run_s(run) if run else None),
            "problems_s": r(sw.wall_s), "first_mode_set_up_ahead_s": r(phases.get(AHEAD)),
            "first_mode_wall_s": r(first.wall_s if first else None)}


def ahead_ab(a, pairs: int) -> dict:
    """``pairs`` pairs of sweeps, the first mode set up ahead of its turn ("on") and not
    ("off"), the order alternating; each run's figures, each pair's differences (on less
    off) and their medians. A sweep that fails is said and left out of its pair."""
    from cudnn_explorer.core.model_sweep import ModelSweep

    runs = {"on": [], "off": []}
    diffs = []
    for i in range(pairs):
        pair = {}
        for ahead in ((True, False) if i % 2 == 0 else (False, True)):
            name = "on" if ahead else "off"
            print(f"\n== pair {i + 1} of {pairs}, set up ahead {name}", flush=True)
            with tempfile.TemporaryDirectory(prefix="bench_model_ab_") as tmp:
                out = os.path.join(tmp, "sweep.json")
                rc, wall, before_run, _, _ = timed_sweep(command(a, out, ahead), a.device)
                if rc != 0:
                    print(f"the model command exited {rc}: left out")
                    continue
                with open(out) as f:
                    got = ab_figures(wall, before_run, ModelSweep.from_json(f.read()))
            runs[name].append(got)
            pair[name] = got
        if len(pair) == 2:
            diffs.append(pair_difference(pair["on"], pair["off"]))
    summary = {"runs": runs, "differences_on_less_off": diffs,
               "median_differences": median_differences(diffs)}
    print("\n" + ab_text(summary))
    return summary


AB_KEYS = ("sweep_s", "before_pytorch_run_s", "pytorch_run_s", "problems_s")


def pair_difference(on: dict, off: dict) -> dict:
    """One pair's figures, on less off (s; None where either lacks one)."""
    return {k: None if on.get(k) is None or off.get(k) is None else round(on[k] - off[k], 2)
            for k in AB_KEYS}


def median_differences(diffs) -> dict:
    """The median of each figure's pair differences (None where no pair has it)."""
    out = {}
    for k in AB_KEYS:
        vals = [d[k] for d in diffs if d.get(k) is not None]
        out[k] = round(statistics.median(vals), 2) if vals else None
    return out


def ab_text(summary: dict) -> str:
    """The A/B's result, said: each pair's differences and their medians."""
    diffs = summary["differences_on_less_off"]
    if not diffs:
        return "set up ahead on against off: no complete pair"
    lines = [f"set up ahead on less off, {len(diffs)} pair(s) on one GPU (s; negative: "
             f"faster with the setup ahead):"]
    names = {"sweep_s": "the whole sweep", "before_pytorch_run_s": "before PyTorch's run",
             "pytorch_run_s": "PyTorch's run of the model", "problems_s": "the problems"}
    med = summary["median_differences"]
    for k in AB_KEYS:
        each = ", ".join("n/a" if d[k] is None else f"{d[k]:+.2f}" for d in diffs)
        m = "n/a" if med[k] is None else f"{med[k]:+.2f}"
        lines.append(f"  {names[k]}: median {m} (each pair: {each})")
    return "\n".join(lines)


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
