"""Benchmark (e): a model sweep on every GPU of the node against the same sweep on one.

Runs the model command twice, each with a fresh results store: once alone on GPU 0, once
under torchrun with one process per GPU; prints both wall times, their ratio, and whether
the merged result holds exactly the problems of the one-GPU run. Then, with --consistency,
every rank runs every problem and rank 0 reports where identical GPUs differ.

Usage: python scripts/bench_torchrun.py [--gpus 2] [--model resnet50] [--batch 32]
           [--amp fp16] [--json PATH]
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


def run(cmd, env=None):
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        print(p.stdout[-3000:], p.stderr[-3000:], sep="\n")
    return p, wall


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", default="32")
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    sys.path.insert(0, ROOT)
    from cudnn_explorer.core.sweep import ModelSweep

    tmp = tempfile.mkdtemp(prefix="bench_torchrun_")
    args = ["model", a.model, "--batch", a.batch, "--amp", a.amp, "--channels-last",
            "--quiet"]
    one_json, many_json = os.path.join(tmp, "one.json"), os.path.join(tmp, "many.json")
    p1, wall1 = run([sys.executable, "-m", "cudnn_explorer", *args, "--store",
                     os.path.join(tmp, "one.db"), "--json", one_json])
    torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                "--nproc-per-node", str(a.gpus), "-m", "cudnn_explorer"]
    p2, wall2 = run([*torchrun, *args, "--store", os.path.join(tmp, "many.db"), "--json",
                     many_json])
    if p1.returncode != 0 or p2.returncode != 0:
        print(f"a sweep failed: exit {p1.returncode} (one GPU), {p2.returncode} "
              f"({a.gpus} GPUs)")
        return 1
    with open(one_json) as f:
        one = ModelSweep.from_json(f.read())
    with open(many_json) as f:
        many = ModelSweep.from_json(f.read())
    same = ({e.index for e in one.entries} == {e.index for e in many.entries}
            and one.capture.problems == many.capture.problems)
    p3, wall3 = run([*torchrun, *args, "--store", os.path.join(tmp, "consistency.db"),
                     "--consistency", "--json", os.path.join(tmp, "consistency.json")])
    print(p3.stdout)
    figures = {"model": a.model, "gpu": one.environment.gpu_name, "gpus": a.gpus,
               "one_gpu_wall_s": round(wall1, 1), "torchrun_wall_s": round(wall2, 1),
               "ratio": round(wall2 / wall1, 3), "same_problems": same,
               "consistency_wall_s": round(wall3, 1), "goal_met": wall2 <= 0.6 * wall1}
    print(f"one GPU: {wall1:.1f} s; {a.gpus} GPUs under torchrun: {wall2:.1f} s; ratio "
          f"{figures['ratio']} (goal <= 0.6: {'met' if figures['goal_met'] else 'NOT met'}); "
          f"merged result holds the same problems: {same}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(figures, f, indent=1)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
