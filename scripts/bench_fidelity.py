"""Benchmark (a): do our re-timed numbers match PyTorch's own steady-state time?

For ResNet-50 layers in fp32 (TF32 allowed), fp32 strict and fp16 channels_last, forward
and backward, this finds the legacy algorithm whose kernels PyTorch's own call launches
(kernel names via torch.profiler), then times, side by side in one process with the same
method (warm-up, CUDA events around CUDA-graph replays): our extension's re-timing of that
algorithm, and PyTorch's call. PyTorch runs its legacy cuDNN path here
(TORCH_CUDNN_V8_API_DISABLED=1, benchmark off), so that a legacy algorithm can match it.

Target: ours / PyTorch within +-5% on at least 90% of the matched problems.
Usage: python scripts/bench_fidelity.py [--budget-ms 200] [--json out.json]
"""
import argparse
import json
import os
import sys

os.environ["TORCH_CUDNN_V8_API_DISABLED"] = "1"  # before torch is imported

import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from cudnn_explorer import ConvProblem  # noqa: E402
from cudnn_explorer.core.stats import timing_stats  # noqa: E402
from cudnn_explorer.core.options import TimingSpec  # noqa: E402
from cudnn_explorer.measure import kernels, timing  # noqa: E402
from cudnn_explorer.measure import native as _native  # noqa: E402
from cudnn_explorer.measure import pipeline as gpu  # noqa: E402
from cudnn_explorer.measure.problem_child import torch_call  # noqa: E402

# (name, shape, out_channels, kernel, stride, dtype, tf32, layout)
LAYERS = [
    ("conv1 7x7/2", "32,3,224,224", 64, 7, 2),
    ("res2 1x1 64-64", "32,64,56,56", 64, 1, 1),
    ("res2 3x3 64-64", "32,64,56,56", 64, 3, 1),
    ("res2 1x1 64-256", "32,64,56,56", 256, 1, 1),
    ("res3 3x3 128/2", "32,128,56,56", 128, 3, 2),
    ("res4 3x3 256", "32,256,14,14", 256, 3, 1),
]
MODES = [("fp32 TF32", "float32", True, "nchw"), ("fp32 strict", "float32", False, "nchw"),
         ("fp16 NHWC", "float16", None, "nhwc")]
DIRECTIONS = ("fwd", "bwd-data", "bwd-filter")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=200.0)
    ap.add_argument("--json")
    ap.add_argument("--limit", type=int, default=0, help="only the first N cases")
    a = ap.parse_args()
    torch.backends.cudnn.benchmark = False
    cases = [(l, m, d) for l in LAYERS for m in MODES for d in DIRECTIONS]
    # A spread of cases rather than the full product: every layer, mode and direction.
    cases = [c for i, c in enumerate(cases) if i % 4 == 0]
    if a.limit:
        cases = cases[:a.limit]
    rows = []
    for (name, shape, k, ks, s), (mname, dtype, tf32, layout), d in cases:
        torch.backends.cuda.matmul.allow_tf32 = bool(tf32)
        torch.backends.cudnn.allow_tf32 = bool(tf32) if dtype == "float32" else True
        p = ConvProblem.create(shape, out_channels=k, kernel=ks, stride=s, dtype=dtype,
                               tf32=tf32, layout=layout)
        t = gpu.make_tensors(p, d, poison=False)  # PyTorch reads all three tensors
        call = torch_call(p, d, t)
        theirs = kernels.kernel_names(call)
        exp = gpu.explore(p, directions=[d], retime=False, check=False, pytorch=False,
                          engines=False)
        match = None
        np_ = gpu.native_problem(p, t)
        for r in exp.directions[0].find:
            if not r.ok:
                continue
            ours = kernels.kernel_names(
                lambda r=r: _native.run_algorithm(d, np_, r.algo, r.math_type))
            if ours == theirs:
                match = r
                break
        row = {"layer": name, "mode": mname, "direction": d, "torch_kernels": list(theirs)}
        if match is None:
            row["match"] = None
            print(f"{name:18s} {mname:11s} {d:10s}  no legacy algorithm launches PyTorch's "
                  f"kernels {theirs}", flush=True)
            rows.append(row)
            continue
        # Side by side, interleaved: ours, theirs, ours, theirs.
        mine, pt = [], []
        for _ in range(2):
            tm = _native.time_algorithm(d, np_, match.algo, match.math_type,
                                        TimingSpec(budget_ms=a.budget_ms / 2))
            mine.append(timing_stats(tm.per_launch_ms)["median_ms"])
            pt.append(timing.time_callable(call, TimingSpec(budget_ms=a.budget_ms / 2)).median_ms)
        ours_ms, torch_ms = sorted(mine)[0], sorted(pt)[0]
        ratio = ours_ms / torch_ms
        row.update(match=f"{match.algo_name} ({match.math_type})", ours_ms=ours_ms,
                   torch_ms=torch_ms, ratio=ratio, ours_runs=mine, torch_runs=pt)
        rows.append(row)
        print(f"{name:18s} {mname:11s} {d:10s}  {row['match']:40s} ours {ours_ms:.4f} ms  "
              f"torch {torch_ms:.4f} ms  ratio {ratio:.3f}", flush=True)
    matched = [r for r in rows if r.get("ratio")]
    within = [r for r in matched if abs(r["ratio"] - 1) <= 0.05]
    print(f"\nfidelity: {len(within)}/{len(matched)} matched problems within +-5% "
          f"({100 * len(within) / max(len(matched), 1):.0f}%); "
          f"{len(rows) - len(matched)} of {len(rows)} had no kernel-identical legacy algorithm")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
