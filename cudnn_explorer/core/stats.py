"""The statistics every measurement and report uses, written once: quantiles (linear
interpolation between order statistics, numpy's default), the median, the IQR spread, the
mean, the sample variance, the normal-approximation 95% confidence interval of a mean, and
the Pareto front of (workspace, time) points. Pure Python."""
from __future__ import annotations

import math
import statistics
from typing import Callable, List, Optional, Sequence, Tuple, TypeVar

__all__ = ["Z95", "quantile", "median", "spread", "mean", "variance", "ci95_halfwidth",
           "timing_stats", "pareto_front"]

Z95 = 1.96  # two-sided 95% quantile of the normal distribution
T = TypeVar("T")


def quantile(xs: Sequence[float], q: float) -> Optional[float]:
    """The ``q``-quantile (0..1) of ``xs``, interpolated linearly; None when empty."""
    s = sorted(xs)
    if not s:
        return None
    x = q * (len(s) - 1)
    lo = int(x)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (x - lo)


def median(xs: Sequence[float]) -> Optional[float]:
    """The median (the mean of the two middle values for an even count); None when empty."""
    return statistics.median(xs) if len(xs) else None


def spread(xs: Sequence[float]) -> Optional[float]:
    """(p75 - p25) / median, torch.utils.benchmark's noise measure; None without samples
    or with a median of 0."""
    m = median(xs)
    if not m:
        return None
    return (quantile(xs, 0.75) - quantile(xs, 0.25)) / m


def mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def variance(xs: Sequence[float]) -> float:
    """The sample variance (n - 1); 0 for fewer than two values."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return sum((x - m) ** 2 for x in xs) / (len(xs) - 1)


def ci95_halfwidth(xs: Sequence[float]) -> float:
    """Half-width of the normal-approximation 95% confidence interval of the mean of
    ``xs``; infinite for fewer than two values."""
    if len(xs) < 2:
        return float("inf")
    return Z95 * math.sqrt(variance(xs) / len(xs))


def timing_stats(samples_ms: Sequence[float]) -> dict:
    """median, p25, p75, min (ms), n and spread = IQR / median of per-launch samples."""
    if len(samples_ms) == 0:
        raise ValueError("no samples")
    v = [float(x) for x in samples_ms]
    p25, med, p75 = (quantile(v, q) for q in (0.25, 0.5, 0.75))
    return {"median_ms": med, "p25_ms": p25, "p75_ms": p75, "min_ms": min(v),
            "samples": len(v), "spread": (p75 - p25) / med if med > 0 else float("inf")}


def pareto_front(items: Sequence[T],
                 key: Callable[[T], Tuple[float, float]] = lambda p: p) -> List[T]:
    """The items no other item beats in both workspace and time (``key``: (workspace,
    time)): each one's time is lower than that of every item with less or equal
    workspace; by increasing workspace."""
    front: List[T] = []
    for it in sorted(items, key=key):
        if not front or key(it)[1] < key(front[-1])[1]:
            front.append(it)
    return front
