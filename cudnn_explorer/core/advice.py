"""Should benchmark mode be on for this workload? The advisor's arithmetic. Pure Python.

Inputs, per input size of the workload (from PyTorch's own run of the model, one fresh
process with benchmark on and one with it off, core/model_run.py): its share of the
iterations, the first iteration's cost beyond a steady one (the plan searches with
benchmark on, the heuristic plan builds with it off), the steady iterations' samples,
and the first iteration's peak memory.

For N iterations drawn from the shares, size s is met at least once with probability
1 - (1 - p_s)^N, and then pays its first-iteration overhead once (per process; again if
PyTorch's plan cache evicts it, which its default limit of 10,000 plans does not do for
one model). The expected total is

    T_mode(N) = sum_s (1 - (1 - p_s)^N) * overhead_mode_s + N * sum_s p_s * mean_mode_s

The steady difference per iteration, sum_s p_s (mean_off_s - mean_on_s), comes with a 95%
confidence interval (normal approximation, Welch standard errors). The verdict:

* benchmark on, when on is faster in steady state beyond the interval and T_on(N) <
  T_off(N) (N at least the break-even count);
* off, when it is slower, not faster beyond noise, or not paid back within N;
* bucket your shapes to K sizes, when padding every input up to the next of K measured
  sizes with benchmark on beats both (fewer new shapes to search, each one a larger
  input);
* pinned, with a plan file (a third mode: the model pinned to the file's plans, in a fresh
  process of its own): when its expected total is the least of all, and its steady
  iteration is not slower than benchmark off's or on's beyond its 95% CI. T_pinned(N) is
  T_mode(N) with the pinned run's overheads (its plan builds) and steady means.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from typing import List, Optional, Sequence, Tuple

from .capture import Capture
from .errors import UserError
from .model_run import ModelRun
from .exploration import Environment
from . import stats
from .schema import Record, check_schema, parse_json, shown
from .stability import Stability

__all__ = ["ADVICE_SCHEMA", "ADVICE_VERSION", "ShapeCost",
           "comparable", "costs_from_run", "expected_total_ms", "steady_difference", "pinned_difference",
           "break_even",
           "Bucketing", "best_bucketing", "Verdict", "verdict", "Advice", "plans_needed",
           "PLAN_CACHE_LIMIT"]

ADVICE_SCHEMA = "cudnn_explorer.advice"
ADVICE_VERSION = 1
MAX_N = 10**12
# PyTorch's cache of cuDNN plans (aten/src/ATen/native/cudnn/Conv_v8.cpp): at most this
# many per thread, least recently used evicted first; TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT
# sets it (0: no limit; negative: nothing cached, every call plans again).
PLAN_CACHE_LIMIT = 10000


@dataclass(frozen=True)
class ShapeCost:
    """One input size of the workload: its share of the iterations and what it costs
    with benchmark on and off (ms; memory in bytes)."""

    size: int
    share: float
    overhead_on_ms: float
    overhead_off_ms: float
    steady_on: Tuple[float, ...]
    steady_off: Tuple[float, ...]
    peak_on_bytes: int = 0
    peak_off_bytes: int = 0
    # The steady means of every process with benchmark on at this size (the run and its
    # --repeats), when there are two or more: the spread between processes.
    process_means_on: Tuple[float, ...] = ()
    method: str = "eager"  # how steady_on and steady_off were timed: "graph" or "eager"
    # the pinned mode, where it ran (timed as steady_on and steady_off were): its first
    # iteration's cost beyond a steady one, its steady iterations, its first-iteration
    # peak, and its first iteration's convolution calls that ran pinned and fell back
    overhead_pinned_ms: Optional[float] = None
    steady_pinned: Tuple[float, ...] = ()
    peak_pinned_bytes: int = 0
    pinned_calls: int = 0
    fallback_calls: int = 0

    @property
    def has_pinned(self) -> bool:
        return self.overhead_pinned_ms is not None and len(self.steady_pinned) > 0

    @property
    def mean_pinned(self) -> float:
        return stats.mean(self.steady_pinned)

    @property
    def mean_on(self) -> float:
        return stats.mean(self.steady_on)

    @property
    def mean_off(self) -> float:
        return stats.mean(self.steady_off)

    @property
    def search_cost_ms(self) -> float:
        """What this size's first iteration costs with benchmark on beyond what it costs
        with it off, each over its own steady iteration: the search, paid once."""
        return self.overhead_on_ms - self.overhead_off_ms


def plans_needed(capture: Capture) -> Tuple[Tuple[int, int], Tuple[int, int]]:
    """The plans PyTorch's cache holds, one per unique problem and direction, as
    ((forward, backward) for one pass over every input size, (forward, backward) for the
    size that needs the most). The caches are per thread: the forward pass fills the
    calling thread's, the backward pass the autograd engine's worker thread's
    (UniqueConv.passes: a transposed convolution's backward-data is in the forward pass)."""
    def count(problems) -> Tuple[int, int]:
        return tuple(sum(1 for u in problems for d in u.directions if p in u.passes(d))
                     for p in ("forward", "backward"))

    every = count(capture.problems)
    per = [count([capture.problems[i] for i in s.problems]) for s in capture.sizes]
    return every, (max(f for f, _ in per), max(b for _, b in per)) if per else every


def costs_from_run(run: ModelRun, sizes: Sequence[Tuple[int, float]],
                   repeats: Optional[ModelRun] = None) -> List[ShapeCost]:
    """Per size (in ``sizes`` order, shares normalised), from the benchmark and the
    heuristic modes' runs; UserError when either run lacks a size. ``repeats``: more
    runs with benchmark on, each a fresh process; their steady means give the spread
    between processes (ShapeCost.process_means_on)."""
    on, off = run.mode("benchmark"), run.mode("heuristic")
    if on is None or off is None:
        missing = "benchmark" if on is None else "heuristics"
        raise UserError(f"no {missing} run of the model to compare with")
    pin = run.mode("pinned")
    total = sum(c for _, c in sizes)
    out = []
    for k, (size, count) in enumerate(sizes):
        if k >= len(on.sizes) or k >= len(off.sizes):
            raise UserError(f"size {size}: the runs of the model stopped before it")
        a, b = on.sizes[k], off.sizes[k]
        if not (a.steady and a.steady.samples_ms and b.steady and b.steady.samples_ms):
            raise UserError(f"size {size}: no steady iterations were timed")
        p = pin.sizes[k] if pin is not None and k < len(pin.sizes) and \
            pin.sizes[k].steady and pin.sizes[k].steady.samples_ms else None
        # like with like: a graph on one side and not on the other compares eager steps
        xa, xb, method = comparable(a.steady, b.steady)
        if p is not None and method == "graph" and p.steady.method != "graph":
            xa, xb, method = _samples(a.steady, "eager"), _samples(b.steady, "eager"), "eager"
        if not (xa and xb):
            raise UserError(f"size {size}: no eager steady iterations to compare")
        ma, mb = stats.mean(xa), stats.mean(xb)
        others = [_samples(r.sizes[k].steady, method)
                  for r in (repeats.modes if repeats is not None else [])
                  if r.ok and k < len(r.sizes) and r.sizes[k].steady]
        means = [ma] + [stats.mean(x) for x in others if x]
        pinned = {}
        xp = _samples(p.steady, method) if p is not None else []
        if xp:
            pinned = dict(overhead_pinned_ms=max(p.first_ms - stats.mean(xp), 0.0),
                          steady_pinned=tuple(xp), peak_pinned_bytes=p.first_peak_reserved_bytes,
                          pinned_calls=p.pinned.pinned_calls if p.pinned else 0,
                          fallback_calls=p.pinned.fallback_calls if p.pinned else 0)
        out.append(ShapeCost(
            size=size, share=count / total, overhead_on_ms=max(a.first_ms - ma, 0.0),
            overhead_off_ms=max(b.first_ms - mb, 0.0),
            steady_on=tuple(xa), steady_off=tuple(xb), method=method,
            peak_on_bytes=a.first_peak_reserved_bytes,
            peak_off_bytes=b.first_peak_reserved_bytes,
            process_means_on=tuple(means) if len(means) >= 2 else (), **pinned))
    return out


def _samples(t, method: str) -> List[float]:
    """``t``'s steady samples timed by ``method``: a graph's replays, or eager steps (the
    samples of an eager timing, the round beside a graph's)."""
    if method == "graph":
        return list(t.samples_ms) if t.method == "graph" else []
    return list(t.eager_ms) if t.method == "graph" else list(t.samples_ms)


def comparable(a, b) -> Tuple[List[float], List[float], str]:
    """The steady samples of two runs' IterationTimings timed alike, and how: graph
    replays when both were captured, else eager steps on both sides."""
    method = "graph" if a.method == b.method == "graph" else "eager"
    return _samples(a, method), _samples(b, method), method


def _met(share: float, n: int) -> float:
    """Probability that a size with ``share`` occurs at least once in ``n`` draws."""
    if share >= 1.0:
        return 1.0 if n >= 1 else 0.0
    return -math.expm1(n * math.log1p(-share))


def expected_total_ms(costs: Sequence[ShapeCost], on, n: int) -> float:
    """T_on(n) (``on`` True), T_off(n) (False) or T_pinned(n) (``on`` "pinned"):
    first-iteration overheads of the sizes met, plus n steady iterations."""
    total = 0.0
    for c in costs:
        if on == "pinned":
            over, mean = c.overhead_pinned_ms, c.mean_pinned
        else:
            over, mean = (c.overhead_on_ms, c.mean_on) if on else (c.overhead_off_ms,
                                                                  c.mean_off)
        total += _met(c.share, n) * over + n * c.share * mean
    return total


def _diff_var(c: ShapeCost) -> float:
    """The variance of mean_off - mean_on. Within each process: Welch's. Each mode is one
    process, though, and processes differ (CPU placement, other load, for a model whose
    iteration waits on the host): with two or more processes with benchmark on, the
    variance of their means, taken for each mode, when it is the larger."""
    within = (stats.variance(c.steady_on) / len(c.steady_on)
              + stats.variance(c.steady_off) / len(c.steady_off))
    between = 2 * stats.variance(c.process_means_on) if len(c.process_means_on) >= 2 else 0.0
    return max(within, between)


def steady_difference(costs: Sequence[ShapeCost]) -> Tuple[float, float, float]:
    """(off - on, low, high): the steady time per iteration that benchmark mode saves, ms,
    weighted by share, with its 95% confidence interval (_diff_var)."""
    d = sum(c.share * (c.mean_off - c.mean_on) for c in costs)
    se2 = sum(c.share ** 2 * _diff_var(c) for c in costs)
    half = stats.Z95 * math.sqrt(se2)
    return d, d - half, d + half


def pinned_difference(costs: Sequence[ShapeCost], against: str = "off"
                      ) -> Tuple[float, float, float]:
    """(``against`` - pinned, low, high): the steady time per iteration that pinning saves
    against benchmark "off" or "on", ms, weighted by share, with its 95% CI (Welch)."""
    other = (lambda c: c.steady_off) if against == "off" else (lambda c: c.steady_on)
    d = sum(c.share * (stats.mean(other(c)) - c.mean_pinned) for c in costs)
    se2 = sum(c.share ** 2 * (stats.variance(other(c)) / len(other(c))
                              + stats.variance(c.steady_pinned) / len(c.steady_pinned))
              for c in costs)
    half = stats.Z95 * math.sqrt(se2)
    return d, d - half, d + half


def break_even(costs: Sequence[ShapeCost]) -> Optional[int]:
    """The least iteration count from which benchmark on is not slower in total than off
    (expected), or None when it never is (on is not faster in steady state)."""
    def diff(n: int) -> float:  # <= 0: on is not slower (to a part in 10^12: rounding)
        off = expected_total_ms(costs, False, n)
        return expected_total_ms(costs, True, n) - off - 1e-12 * off

    if diff(1) <= 0:
        return 1
    if sum(c.share * (c.mean_on - c.mean_off) for c in costs) >= 0:
        return None
    hi = 2
    while diff(hi) > 0:
        hi *= 2
        if hi > MAX_N:
            return None
    lo = hi // 2  # diff(lo) > 0 >= diff(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if diff(mid) > 0:
            lo = mid
        else:
            hi = mid
    return hi


@dataclass(frozen=True)
class Bucketing:
    """Pad every input up to the next of ``sizes`` (benchmark on)."""

    sizes: Tuple[int, ...]
    total_ms: float


def _bucketed(costs: Sequence[ShapeCost], keep: Sequence[int]) -> List[ShapeCost]:
    by_size = {c.size: c for c in costs}
    keep = sorted(keep)
    share = {b: 0.0 for b in keep}
    for c in costs:
        share[next(b for b in keep if b >= c.size)] += c.share
    return [ShapeCost(b, share[b], by_size[b].overhead_on_ms, by_size[b].overhead_off_ms,
                      by_size[b].steady_on, by_size[b].steady_off, by_size[b].peak_on_bytes,
                      by_size[b].peak_off_bytes) for b in keep if share[b] > 0]


def best_bucketing(costs: Sequence[ShapeCost], n: int) -> Optional[Bucketing]:
    """The best K < number of sizes buckets with benchmark on: the largest size (every
    input must fit) and then the most frequent ones, for each K; None with one size."""
    if len(costs) < 2:
        return None
    largest = max(c.size for c in costs)
    order = [c.size for c in sorted(costs, key=lambda c: -c.share) if c.size != largest]
    best = None
    for k in range(1, len(costs)):
        keep = [largest] + order[:k - 1]
        t = expected_total_ms(_bucketed(costs, keep), True, n)
        if best is None or t < best.total_ms:
            best = Bucketing(tuple(sorted(keep)), t)
    return best


@dataclass(frozen=True)
class Verdict:
    choice: str          # "on" | "off" | "bucket" | "pinned"
    reason: str
    total_on_ms: float
    total_off_ms: float
    saving_ms: float     # steady per iteration, off - on
    saving_low_ms: float
    saving_high_ms: float
    break_even: Optional[int]
    bucketing: Optional[Bucketing] = None
    total_pinned_ms: Optional[float] = None           # with a pinned run at every size
    pinned_vs_off: Optional[Tuple[float, float, float]] = None  # pinned_difference
    pinned_vs_on: Optional[Tuple[float, float, float]] = None


def verdict(costs: Sequence[ShapeCost], n: int) -> Verdict:
    """The choice for ``n`` iterations of the workload, and why: among benchmark on, off
    and bucketing, and pinned where the workload has a pinned run at every size."""
    v = _on_off_verdict(costs, n)
    if not costs or not all(c.has_pinned for c in costs):
        return v
    t_pin = expected_total_ms(costs, "pinned", n)
    vs_off, vs_on = pinned_difference(costs, "off"), pinned_difference(costs, "on")
    v = replace(v, total_pinned_ms=t_pin, pinned_vs_off=vs_off, pinned_vs_on=vs_on)
    others = [v.total_on_ms, v.total_off_ms] + ([v.bucketing.total_ms]
                                                 if v.choice == "bucket" else [])
    slower = [f"benchmark {m} by {-d:.2f} ms per iteration (95% CI {-hi:.2f} to {-lo:.2f})"
              for m, (d, lo, hi) in (("off", vs_off), ("on", vs_on)) if hi < 0]
    if t_pin < min(others) and not slower:
        d, lo, hi = vs_off
        return replace(v, choice="pinned", reason=(
            f"pinned to the plan file, the workload is expected to take {t_pin / 1e3:.1f} s "
            f"for {n} iterations (on: {v.total_on_ms / 1e3:.1f} s, off: "
            f"{v.total_off_ms / 1e3:.1f} s): no search, and {d:+.2f} ms per iteration "
            f"against benchmark off (95% CI {lo:+.2f} to {hi:+.2f})"))
    why = (f"slower in steady state than {' and '.join(slower)}" if slower else
           f"expected to take {t_pin / 1e3:.1f} s, not less than "
           f"{min(others) / 1e3:.1f} s")
    return replace(v, reason=f"{v.reason}; pinned to the plan file, it is {why}")


def _on_off_verdict(costs: Sequence[ShapeCost], n: int) -> Verdict:
    """The choice between benchmark on, off and bucketing, and why."""
    d, lo, hi = steady_difference(costs)
    t_on, t_off = expected_total_ms(costs, True, n), expected_total_ms(costs, False, n)
    be = break_even(costs)
    bucket = best_bucketing(costs, n)
    base = dict(total_on_ms=t_on, total_off_ms=t_off, saving_ms=d, saving_low_ms=lo,
                saving_high_ms=hi, break_even=be)
    if bucket is not None and lo > 0 and bucket.total_ms < min(t_on, t_off):
        return Verdict("bucket", f"with benchmark on, padding every input up to the next of "
                       f"{len(bucket.sizes)} sizes leaves fewer shapes to search and is "
                       f"expected to take {bucket.total_ms / 1e3:.1f} s for {n} iterations "
                       f"(on: {t_on / 1e3:.1f} s, off: {t_off / 1e3:.1f} s)",
                       bucketing=bucket, **base)
    if hi < 0:
        return Verdict("off", f"benchmark mode is slower in steady state by {-d:.2f} ms per "
                       f"iteration (95% CI {-hi:.2f} to {-lo:.2f})", **base)
    if lo <= 0:
        return Verdict("off", f"benchmark mode saves no measurable steady time ({d:+.2f} ms "
                       f"per iteration, 95% CI {lo:+.2f} to {hi:+.2f}), and its first "
                       f"calls cost time and memory", **base)
    if t_on >= t_off:
        return Verdict("off", f"benchmark mode saves {d:.2f} ms per iteration, but its first "
                       f"calls are paid back only after {be} iterations (of {n})", **base)
    return Verdict("on", f"benchmark mode saves {d:.2f} ms per iteration (95% CI {lo:.2f} to "
                   f"{hi:.2f}); its first calls are paid back after {be} iterations",
                   **base)


@dataclass
class Advice(Record):
    """A saved advice: the workload (``sizes``: [size, count]; ``iterations`` N), the
    capture, PyTorch's runs of the model, and where they were measured. The verdict is
    computed from these when rendered."""

    capture: Capture
    pytorch_run: ModelRun
    sizes: List[List[float]] = field(default_factory=list)
    iterations: int = 0
    environment: Environment = field(default_factory=Environment)
    tool_version: str = ""
    created: str = ""
    repeats: Optional[ModelRun] = None       # --repeats: benchmark mode, fresh each time
    stability: List[Stability] = field(default_factory=list)
    plans: str = ""  # --plans: the plan file of the pinned mode
    plans_predicted_ms: Optional[float] = None  # its sweep's predicted gain per iteration
    schema: str = ADVICE_SCHEMA
    schema_version: int = ADVICE_VERSION

    @property
    def decidable(self) -> bool:
        """Whether the runs with benchmark on and off both finished: a verdict needs both."""
        return (self.pytorch_run.mode("benchmark") is not None
                and self.pytorch_run.mode("heuristic") is not None)

    @property
    def workload(self) -> List[Tuple[int, float]]:
        return [(int(s), float(c)) for s, c in self.sizes]

    def costs(self) -> List[ShapeCost]:
        """Per size of the workload, what it costs with benchmark on and off
        (costs_from_run over this advice's runs)."""
        return costs_from_run(self.pytorch_run, self.workload, self.repeats)

    def to_dict(self) -> dict:
        d = {"schema": self.schema, "schema_version": self.schema_version,
             "tool_version": self.tool_version, "created": self.created,
             "iterations": self.iterations, "sizes": [list(x) for x in self.sizes],
             "environment": self.environment.to_dict(), "capture": self.capture.to_dict(),
             "pytorch_run": self.pytorch_run.to_dict(),
             "repeats": None if self.repeats is None else self.repeats.to_dict(),
             "stability": [s.to_dict() for s in self.stability]}
        if self.plans:  # (advice without a pinned mode is saved as before)
            d.update(plans=self.plans, plans_predicted_ms=self.plans_predicted_ms)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    @classmethod
    def from_json(cls, data) -> "Advice":
        d = parse_json(data)
        check_schema(d, ADVICE_SCHEMA, (ADVICE_VERSION,), "advice")
        try:
            capture = Capture.from_json_dict(d.get("capture"))
        except UserError as e:
            raise UserError(f"capture: {e}") from None
        rest = cls.from_dict({k: v for k, v in d.items() if k != "capture"}
                             | {"capture": capture.to_dict()})
        if not rest.sizes:
            raise UserError("sizes: empty; valid: one [size, count] pair or more")
        for i, s in enumerate(rest.sizes):  # any input side advise measured (--input's too)
            if len(s) != 2 or s[0] < 1 or int(s[0]) != s[0] or not 0 < s[1] < math.inf:
                raise UserError(f"sizes[{i}] {shown(s)}: valid: [size, count], an integer "
                                f"size >= 1 and a count > 0")
        n = len(capture.problems)
        for s in rest.stability:
            if not 0 <= s.problem < n:
                raise UserError(f"stability: problem {s.problem} is not one of the {n} "
                                f"captured problems")
        return rest
