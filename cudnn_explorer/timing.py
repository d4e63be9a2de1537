"""Steady-state timing of a PyTorch callable, by the same method as the extension's
re-timing (csrc/timing.cpp): warm-up, then CUDA events around replays of a CUDA graph of
back-to-back calls (eager calls if capture fails), sampled until a budget is spent.

Used to put PyTorch's own convolution calls side by side with our re-timed algorithms.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from . import analysis

__all__ = ["time_callable"]


def time_callable(fn: Callable[[], object], budget_ms: float = 100.0, warmup_ms: float = 10.0,
                  sample_target_ms: float = 1.0, graph: bool = True, min_samples: int = 5,
                  max_samples: int = 2000) -> dict:
    """Time ``fn`` (which launches GPU work on the current stream) per call.

    Returns timing_stats (median_ms, p25_ms, p75_ms, min_ms, samples, spread) plus
    launches_per_sample, method ("graph" or "eager") and note."""
    import torch

    stream = torch.cuda.current_stream()

    def eager(n: int) -> float:
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(stream)
        for _ in range(n):
            fn()
        b.record(stream)
        b.synchronize()
        return a.elapsed_time(b)

    fn()
    torch.cuda.synchronize()
    est = max(eager(3) / 3, 1e-4)
    eager(int(min(max(math.ceil(warmup_ms / est), 1), 1000)))
    k = int(min(max(math.ceil(sample_target_ms / est), 1), 1000))
    method, note, g = "eager", "", None
    if graph:
        try:
            g = torch.cuda.CUDAGraph()
            side = torch.cuda.Stream()
            side.wait_stream(stream)
            with torch.cuda.stream(side):
                fn()  # warm on the capture stream (PyTorch's advice before capture)
            stream.wait_stream(side)
            with torch.cuda.graph(g):
                for _ in range(k):
                    fn()
            g.replay()
            torch.cuda.synchronize()
            method = "graph"
        except Exception as e:  # noqa: BLE001 - any capture failure: time eagerly
            g, note = None, f"graph capture not used ({type(e).__name__}: {e})"
            torch.cuda.synchronize()
    samples = []
    t0 = time.perf_counter()
    while len(samples) < max_samples and (
            len(samples) < min_samples or (time.perf_counter() - t0) * 1e3 < budget_ms):
        if g is not None:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(stream)
            g.replay()
            b.record(stream)
            b.synchronize()
            samples.append(a.elapsed_time(b) / k)
        else:
            samples.append(eager(k) / k)
    out = analysis.timing_stats(samples)
    out.update(launches_per_sample=k, method=method, note=note)
    return out
