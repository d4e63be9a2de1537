"""Benchmark (b): what does a full exploration cost beyond cudnnFind itself?

Explores the default problem (32,3,224,224, kernel 3; all directions; re-timing and
accuracy check on), after process start and CUDA/cuDNN initialisation, and compares its
wall time with the sum of the raw cudnnFind*Ex calls it made (each timed on the host,
synchronised). Prints the ratio and where the rest of the time went.
Usage: python scripts/bench_overhead.py [--budget-ms 100]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from cudnn_explorer import ConvProblem, explore  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=100.0)
    a = ap.parse_args()
    # CUDA and cuDNN initialisation (context, handle, library loading) outside the timing.
    warm = ConvProblem.create("1,3,8,8", out_channels=4)
    explore(warm, retime=True, budget_ms=1, check=True, pytorch=False, engines=False)
    torch.cuda.synchronize()
    p = ConvProblem.create("32,3,224,224", kernel=3)
    for label, kw in (("Find only (--no-retime --no-check)", dict(retime=False, check=False)),
                      ("full (re-timing + check)", dict(retime=True, check=True,
                                                        budget_ms=a.budget_ms))):
        t0 = time.perf_counter()
        exp = explore(p, pytorch=False, engines=False, **kw)
        torch.cuda.synchronize()
        wall = (time.perf_counter() - t0) * 1e3
        find = sum(d.find_wall_ms for d in exp.directions)
        rows = sum(1 for d in exp.directions for r in d.find if r.ok)
        print(f"{label:38s} wall {wall:9.1f} ms   sum of cudnnFind*Ex {find:8.1f} ms   "
              f"ratio {wall / find:6.2f}   ({rows} successful rows, "
              f"{', '.join(f'{d.direction} {d.find_wall_ms:.1f} ms' for d in exp.directions)})",
              flush=True)
    print(f"re-timing budget per row: {a.budget_ms:g} ms of samples (plus warm-up); "
          f"{rows} rows -> at least {rows * a.budget_ms / 1e3:.1f} s by design")


if __name__ == "__main__":
    main()
