"""Benchmark (c): repeatability. Two explorations of the same problem (same process,
one after the other) must rank rows whose medians differ by more than 10% the same way.

Usage: python scripts/bench_repeat.py [--budget-ms 100]
"""
import argparse
import itertools
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from cudnn_explorer import ConvProblem, explore  # noqa: E402

PROBLEMS = [
    dict(shape="32,3,224,224", kernel=3),
    dict(shape="32,64,56,56", out_channels=64, kernel=3, dtype="float16", layout="nhwc"),
    dict(shape="32,256,14,14", out_channels=256, kernel=3, tf32=False),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget-ms", type=float, default=100.0)
    a = ap.parse_args()
    total = agree = 0
    for spec in PROBLEMS:
        p = ConvProblem.create(**spec)
        runs = [explore(p, budget_ms=a.budget_ms, check=False, pytorch=False, engines=False) for _ in range(2)]
        for d1, d2 in zip(runs[0].directions, runs[1].directions):
            t1 = {r.key: r.timing.median_ms for r in d1.find if r.timing}
            t2 = {r.key: r.timing.median_ms for r in d2.find if r.timing}
            n = ok = 0
            worst = 0.0
            for k1, k2 in itertools.combinations(sorted(set(t1) & set(t2)), 2):
                worst = max(worst, abs(t1[k1] / t2[k1] - 1), abs(t1[k2] / t2[k2] - 1))
                hi, lo = max(t1[k1], t1[k2]), min(t1[k1], t1[k2])
                if hi / lo <= 1.10:
                    continue
                n += 1
                ok += (t1[k1] < t1[k2]) == (t2[k1] < t2[k2])
            total += n
            agree += ok
            print(f"{spec['shape']:14s} {p.dtype:8s} {d1.direction:10s} pairs >10% apart: "
                  f"{n:3d}, same order in run 2: {ok:3d}; largest run-to-run change of one "
                  f"row's median: {100 * worst:.1f}%", flush=True)
    print(f"\nrepeatability: {agree}/{total} pairs ranked the same way")


if __name__ == "__main__":
    main()
