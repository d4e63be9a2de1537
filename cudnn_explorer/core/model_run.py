"""PyTorch's own run of a whole model, one fresh process per mode. Pure Python.

Built once by ``model/run_modes.py`` from its children (``model/mode_child.py``) and rendered
by ``report/model.py``; part of a saved sweep (schema ``cudnn_explorer.sweep`` version 2).

Per mode (benchmark, benchmark timing every candidate, heuristics, deterministic) and per
input size: the model's first iteration (its wall time and peak memory), each
convolution's first call in that process (what PyTorch searched, what it cached, what
the search cost in time and memory), the call during which the iteration's memory peaked,
and the steady iterations after it. Times in ms, memory in bytes.
"""
from __future__ import annotations

from . import stats
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .analysis import NOISY_SPREAD
from .pin_report import PinCounts
from .schema import Record, Signed

__all__ = ["IterationTiming", "ConvCall", "SizeRun", "ModelModeRun", "ModelRun", "AHEAD"]

# A mode's phase spent before its turn (a process set up ahead: Note [first mode set up
# ahead] in jobs/sweep.py): said with the others, but not a part of its wall time.
AHEAD = "set up ahead of its turn"


@dataclass
class IterationTiming(Record):
    """Time per iteration of the steady iterations (forward and backward, or forward
    alone), each between two CUDA events. ``method`` "eager": the model run as it runs,
    host time included; "graph": replays of a CUDA graph of the whole step, the GPU's time
    without the host's, with ``eager_ms`` a round of eager iterations beside it. ``note``:
    why a graph was asked for and not used."""

    samples_ms: List[float] = field(default_factory=list)
    warmup: int = 0
    method: str = "eager"
    note: str = ""
    eager_ms: List[float] = field(default_factory=list)

    @property
    def eager_median_ms(self) -> Optional[float]:
        return stats.median(self.eager_ms)

    @property
    def median_ms(self) -> Optional[float]:
        return stats.median(self.samples_ms)

    def quantile_ms(self, q: float) -> Optional[float]:
        return stats.quantile(self.samples_ms, q)

    @property
    def spread(self) -> Optional[float]:
        """(p75 - p25) / median."""
        return stats.spread(self.samples_ms)

    @property
    def noisy(self) -> bool:
        """IQR / median above NOISY_SPREAD, as a per-problem Timing's."""
        return self.spread is not None and self.spread > NOISY_SPREAD


@dataclass
class ConvCall(Record):
    """One convolution call of the first iteration, synchronised before and after.

    ``problem``: index into the capture's unique problems (-1: a problem the capture did
    not see). ``layer``: the module of a forward call; "" for a backward call (named by the
    problem's layers). ``first``: the first call of this problem and direction in the
    process (the one that searches). ``peak_alloc_bytes``: the allocator's peak during
    the call, absolute; ``alloc_before_bytes``: allocated when it began. ``plan``: the
    engine config PyTorch cached (from the cudnn-frontend log), with the search's
    ``candidates``, how many it ``timed``, and the largest candidate workspace."""

    problem: Signed
    direction: str
    layer: str = ""
    first: bool = False
    ms: float = 0.0
    alloc_before_bytes: int = 0
    peak_alloc_bytes: int = 0
    reserved_before_bytes: int = 0
    reserved_after_bytes: int = 0
    plan: str = ""
    candidates: int = 0
    timed: int = 0
    largest_candidate_bytes: int = 0
    plan_workspace_bytes: Optional[int] = None

    @property
    def peak_above_bytes(self) -> Signed:
        """How far the call took allocated memory above what it started with."""
        return self.peak_alloc_bytes - self.alloc_before_bytes


@dataclass
class SizeRun(Record):
    """One input shape: its first iteration (``first_ms``; peaks absolute, with the
    memory held ``before`` it: weights, input, CUDA and cuDNN state), its convolutions'
    first calls, the call that set the peak (None: the peak was outside any convolution),
    and its steady iterations; in the pinned mode, what ran pinned in the first iteration
    and what fell back."""

    input_shape: List[int]
    first_ms: float = 0.0
    before_alloc_bytes: int = 0
    before_reserved_bytes: int = 0
    first_peak_alloc_bytes: int = 0
    first_peak_reserved_bytes: int = 0
    calls: List[ConvCall] = field(default_factory=list)   # first calls only
    peak_call: Optional[ConvCall] = None
    conv_calls: int = 0                # every convolution call of the iteration
    conv_ms: float = 0.0               # their time, summed
    steady: Optional[IterationTiming] = None
    steady_peak_alloc_bytes: Optional[int] = None
    steady_peak_reserved_bytes: Optional[int] = None
    pinned: Optional[PinCounts] = None  # the pinned mode: the op's record of the first iteration

    @property
    def first_conv_ms(self) -> float:
        """Time of the first calls (the searches among them), summed."""
        return sum(c.ms for c in self.calls)


@dataclass
class ModelModeRun(Record):
    """One mode's fresh process: its settings, or the error that stopped it."""

    label: str
    mode: str                        # benchmark | heuristic | deterministic
    benchmark_limit: Optional[int] = None
    error: str = ""
    sizes: List[SizeRun] = field(default_factory=list)
    wall_s: Optional[float] = None   # the child process, start to end
    stored: str = ""                 # when answered from the results store: measured then
    # where wall_s went (s): the first process's phases (model/mode_runner.py), then
    # "the log read" (the parent's reading of cudnn-frontend's log into PyTorch's picks);
    # AHEAD's, where it is, before wall_s began
    phases_s: Dict[str, float] = field(default_factory=dict)

    @property
    def rest_s(self) -> Optional[float]:
        """What of wall_s no phase holds (the process's start and end, the files between
        it and the parent); None without wall_s."""
        if self.wall_s is None:
            return None
        return self.wall_s - sum(v for k, v in self.phases_s.items() if k != AHEAD)

    @property
    def ok(self) -> bool:
        return not self.error and bool(self.sizes)


@dataclass
class ModelRun(Record):
    """Every mode's run of the model (``modes``, in the order they ran), each with
    ``iterations`` steady iterations after ``warmup`` ones."""

    modes: List[ModelModeRun] = field(default_factory=list)
    iterations: int = 0
    warmup: int = 0
    target_ci: Optional[float] = None  # timed until the mean's 95% CI is within +-this
    method: str = ("a fresh process per mode; cuDNN loaded by a small warm-up convolution "
                   "first; the first iteration synchronised around every convolution "
                   "(a backward call that computes both gradients is run as two calls, "
                   "one per direction); steady iterations between CUDA events")

    def mode(self, mode: str, limit_zero: bool = False) -> Optional[ModelModeRun]:
        """The first run of ``mode`` that worked; for benchmark, the one at the requested
        limit, or with ``limit_zero`` the one that timed every candidate."""
        for m in self.modes:
            if m.ok and m.mode == mode and (not limit_zero or m.benchmark_limit == 0):
                return m
        return None
