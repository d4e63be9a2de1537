"""Benchmark (e): a model sweep on every GPU of the node against the same sweep on one.

Runs the model command as a user would, each time with a fresh results store: once alone
on GPU 0 ("one"), once under torchrun with one process per GPU ("many"); prints both wall
times, their ratio, and whether the merged result holds exactly the problems of the
one-GPU run. Then ("consistency") every rank runs every problem and rank 0 reports where
identical GPUs differ.

Each phase's figures go to KEEP/figures.json as soon as it ends, and a phase already
there is not run again: where one command may run at most some minutes, run the phases
over several commands with the same --keep (the same machine, one after the other).

Usage: python scripts/bench_torchrun.py [--gpus 2] [--model resnet50] [--batch 32]
           [--amp fp16] [--keep DIR] [--phases one,many,consistency] [--json PATH]
Goal (issue: torchrun): on two GPUs, at most 0.6x the one-GPU wall time.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PHASES = ("one", "many", "consistency")


def run(cmd):
    """Run ``cmd``, its output passing straight through; (exit status, wall seconds)."""
    print("$ " + " ".join(cmd[1:] if cmd[0] == sys.executable else cmd), flush=True)
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    return rc, time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--keep", default=None, help="the phases' files (default: a new folder)")
    ap.add_argument("--phases", default=",".join(PHASES))
    ap.add_argument("--json", default=None, help="write the figures here too")
    a = ap.parse_args()
    phases = [p.strip() for p in a.phases.split(",") if p.strip()]
    if any(p not in PHASES for p in phases):
        ap.error(f"--phases: valid: {', '.join(PHASES)}")
    sys.path.insert(0, ROOT)
    from cudnn_explorer.core.model_sweep import ModelSweep

    keep = a.keep or tempfile.mkdtemp(prefix="bench_torchrun_")
    os.makedirs(keep, exist_ok=True)
    fig_path = os.path.join(keep, "figures.json")
    figures = {}
    if os.path.exists(fig_path):
        with open(fig_path) as f:
            figures = json.load(f)
    args = ["model", a.model, "--batch", a.batch, "--amp", a.amp, "--channels-last"]
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(a.gpus), "-m", "cudnn_explorer"]
    commands = {
        "one": [sys.executable, "-m", "cudnn_explorer", *args, "--store",
                os.path.join(keep, "one.db"), "--json", os.path.join(keep, "one.json")],
        "many": [*torchrun, *args, "--store", os.path.join(keep, "many.db"), "--json",
                 os.path.join(keep, "many.json")],
        "consistency": [*torchrun, *args, "--store", os.path.join(keep, "consistency.db"),
                        "--consistency", "--json", os.path.join(keep, "consistency.json")]}
    failed = []
    for phase in phases:
        if f"{phase}_wall_s" in figures:
            print(f"{phase}: {figures[f'{phase}_wall_s']} s, measured before (in {keep})")
            continue
        rc, wall = run(commands[phase])
        if rc != 0:
            print(f"{phase}: the command exited {rc} after {wall:.1f} s")
            failed.append(phase)
            continue
        figures[f"{phase}_wall_s"] = round(wall, 1)
        figures.update(model=a.model, gpus=a.gpus, command=" ".join(commands[phase][1:]))
        with open(fig_path, "w") as f:
            json.dump(figures, f, indent=1)
        print(f"{phase}: {wall:.1f} s wall", flush=True)
    if "one_wall_s" in figures and "many_wall_s" in figures:
        with open(os.path.join(keep, "one.json")) as f:
            one = ModelSweep.from_json(f.read())
        with open(os.path.join(keep, "many.json")) as f:
            many = ModelSweep.from_json(f.read())
        same = ({e.index for e in one.entries} == {e.index for e in many.entries}
                and one.capture.problems == many.capture.problems and not many.missing)
        ratio = figures["many_wall_s"] / figures["one_wall_s"]
        figures.update(gpu=one.environment.gpu_name, cudnn=one.environment.cudnn_runtime,
                       torch=one.environment.torch_version, ratio=round(ratio, 3),
                       same_problems=same, goal_met=ratio <= 0.6)
        figures.pop("command", None)
        with open(fig_path, "w") as f:
            json.dump(figures, f, indent=1)
        print(f"one GPU: {figures['one_wall_s']} s; {a.gpus} GPUs under torchrun: "
              f"{figures['many_wall_s']} s; ratio {figures['ratio']} (goal <= 0.6: "
              f"{'met' if figures['goal_met'] else 'NOT met'}); the merged result holds the "
              f"same problems: {same}")
        if not same:
            failed.append("same problems")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
