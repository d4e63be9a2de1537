"""Steady-state timing of a PyTorch callable by the extension's method (csrc/timing.cpp),
so that PyTorch's own calls sit beside our re-timed rows under the same options:

- warm-up, then CUDA events around replays of a CUDA graph of back-to-back calls
  (``graph``; eager back-to-back calls if capture fails or graphs are off), sampled until
  ``budget_ms`` is spent: method "graph" or "eager";
- with ``flush_l2``: one call per sample, L2 cleared (a memset of twice its size) before
  it, outside the events: method "eager+flush";
- then, unless ``flush_l2``, the host wall time per call of an eager loop (Note [eager
  wall time] in csrc/timing.cpp): the Timing's ``eager`` part.

:func:`timing_from_native` turns the extension's own TimingResult into the same record.
"""
from __future__ import annotations

import math
import time
from typing import Callable

from ..core.options import TimingSpec
from ..core.records import Timing

__all__ = ["time_callable", "timing_from_native"]

MIN_SAMPLES, MAX_SAMPLES, SAMPLE_TARGET_MS = 5, 2000, 1.0


def time_callable(fn: Callable[[], object], spec: TimingSpec) -> Timing:
    """Time ``fn`` (which launches GPU work on the current stream) per call."""
    import torch

    stream = torch.cuda.current_stream()

    def events():
        return torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def eager(n: int) -> float:
        a, b = events()
        a.record(stream)
        for _ in range(n):
            fn()
        b.record(stream)
        b.synchronize()
        return a.elapsed_time(b)

    def sampling(budget_ms: float):
        t0, n = time.perf_counter(), 0
        while n < MAX_SAMPLES and (n < MIN_SAMPLES or (time.perf_counter() - t0) * 1e3 < budget_ms):
            n += 1
            yield

    fn()
    torch.cuda.synchronize()
    est = max(eager(3) / 3, 1e-4)

    def warmups(per: float) -> int:
        return int(min(max(math.ceil(spec.warmup_ms / per), 1), 1000))

    warmup = 4  # the first call and the estimate's
    if spec.flush_l2:
        eager(warmups(est))
        warmup += warmups(est)
        l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
        scratch = torch.empty(max(int(l2), 1 << 20) * 2, dtype=torch.uint8, device="cuda")
        samples = []
        for _ in sampling(spec.budget_ms):
            scratch.zero_()
            samples.append(eager(1))
        return Timing.from_samples(samples, 1, "eager+flush", warmup)
    k = int(min(max(math.ceil(SAMPLE_TARGET_MS / est), 1), 1000))
    method, note, g = "eager", "", None
    if spec.graph:
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
            method = "graph"
        except Exception as e:  # noqa: BLE001 - any capture failure: time eagerly
            g, note = None, f"graph capture not used ({type(e).__name__}: {e})"
            torch.cuda.synchronize()
    if g is not None:  # Note [warm-up replays] in csrc/timing.cpp
        for _ in range(warmups(est * k)):
            g.replay()
        warmup += warmups(est * k) * k
    else:
        eager(warmups(est))
        warmup += warmups(est)
    torch.cuda.synchronize()
    samples = []
    for _ in sampling(spec.budget_ms):
        if g is not None:
            a, b = events()
            a.record(stream)
            g.replay()
            b.record(stream)
            b.synchronize()
            samples.append(a.elapsed_time(b) / k)
        else:
            samples.append(eager(k) / k)
    wall = []
    # the eager loop's calls per sample: csrc/timing.cpp's eager_calls
    k_eager = int(min(max(math.ceil(spec.eager_budget_ms / (MIN_SAMPLES * est)), 1), k))
    if spec.eager_budget_ms > 0:
        torch.cuda.synchronize()
        for _ in sampling(spec.eager_budget_ms):
            t0 = time.perf_counter()
            for _ in range(k_eager):
                fn()
            torch.cuda.synchronize()
            wall.append((time.perf_counter() - t0) * 1e3 / k_eager)
    return Timing.from_samples(samples, k, method, warmup, note, wall, k_eager)


def timing_from_native(t) -> Timing:
    """Timing record of a native TimingResult (csrc/timing.h)."""
    first = getattr(t, "first_ms", -1.0)  # (a fake result may not say)
    return Timing.from_samples(t.per_launch_ms, t.launches_per_sample, t.method,
                               t.warmup_launches, t.note, t.eager_per_call_ms,
                               t.eager_calls_per_sample,
                               first if first is not None and first >= 0 else None)
