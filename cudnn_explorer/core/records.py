"""The records of one direction: cuDNN's rows, engine configs, PyTorch's picks, timings.
Pure Python (no torch import); an Exploration (core/exploration.py) holds them.

Schema ``cudnn_explorer.exploration``, version 6 (see docs/usage.md); versions 1 (Find
only), 2 (no PyTorch comparison), 3 (no engine configs), 4 (no options, no eager times)
and 5 (Find under the descriptor's math type only) still load. Records are built once, by the measuring layer, and not changed
afterwards.
Readers ignore keys they do not know and fill absent optional keys with None, so
later versions can add fields (re-timed measurements, PyTorch's choice, engine
configs, whole models) without breaking saved files.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .analysis import FIND_DISAGREE, NOISY_SPREAD
from .errors import UserError
from .problem import DIRECTIONS
from .schema import Record, Signed, shown
from .staging import StagedNotes
from .stats import timing_stats

__all__ = ["AlgoResult", "WorkspaceEntry", "DirectionResult", "Timing", "PyTorchPick",
           "EngineConfig", "EngineSpace", "MIB", "SUCCESS", "rankable", "find_row_note",
           "verdict"]

MIB = 1024 * 1024
SUCCESS = "CUDNN_STATUS_SUCCESS"


def verdict(checked) -> Optional[bool]:
    """Whether an output checked against the float64 reference is correct: True/False, or
    None if not checked. ``checked``: anything with ``output_finite``, ``max_error`` and
    ``tolerance`` (a record below, or measure.tensors.Check)."""
    if checked.output_finite is False:
        return False
    if checked.max_error is None or checked.tolerance is None:
        return None
    return checked.max_error <= checked.tolerance  # NaN compares False: never correct


class _Checked:
    """``correct`` of a record checked against the float64 reference (its fields
    ``output_finite``, ``max_error`` and ``tolerance``)."""

    @property
    def correct(self) -> Optional[bool]:
        """True/False once checked against the reference; None if not checked."""
        return verdict(self)


def find_row_note(need_bytes: Optional[int], given_bytes: int, capped: bool,
                  free_bytes: Optional[int] = None) -> str:
    """Why a Find row that did not run could not: it needs more workspace than Find was
    given, because of --max-workspace or because the GPU had no more free (``free_bytes``:
    the largest block it could give, recorded only when it was less than Find wanted; Find
    was given that less a headroom for cuDNN's own allocations, Note [Find workspace that
    fits] in csrc/find.cpp); "" when that is not the reason."""
    if need_bytes is None or need_bytes <= given_bytes:
        return ""
    if free_bytes is not None:
        why = f" (out of GPU memory: {free_bytes / MIB:.2f} MiB free)"
    else:
        why = " (--max-workspace)" if capped else ""
    return f"needs {need_bytes / MIB:.2f} MiB workspace > {given_bytes / MIB:.2f} MiB given{why}"


def rankable(r) -> bool:
    """A row (AlgoResult) or engine config that ran, has a time, and is not WRONG; an
    row or engine config that left a staged search early (timed briefly) is not."""
    return r.ok and r.time is not None and r.correct is not False and \
        getattr(r, "left_round", None) is None


@dataclass
class Timing(Record):
    """Our steady-state re-timing of one row (all times in ms per launch).

    ``method``: "graph" (events around replays of a CUDA graph of
    ``launches_per_sample`` launches), "eager" (events around that many back-to-back
    launches), "eager+flush" (one launch per sample, L2 cleared before it) or "cut" (a
    staged search's first round stopped early, slower than its cutoff: Note [cut
    launches] in core/staging.py; either after its first launch and one warm one, that
    warm one its sample, ``warmup_launches`` 1, or after its first launch alone, whose
    GPU time was surely over the cutoff: its sample is that lower bound, the launch's
    events less the host's time to issue it, ``warmup_launches`` 0; Note [one-launch cut]
    in csrc/timing.cpp).
    ``spread`` = (p75 - p25) / median. ``eager``: the wall time per call of an eager loop
    of ``eager.launches_per_sample`` back-to-back calls measured on the host clock and
    synchronised at the end (method "wall"): what a caller pays when it does not use CUDA
    graphs, host cost included (None: not measured). ``first_ms``: the timing's first
    launch (events around one eager launch, before any sample), whose time includes
    loading the kernel's module where it had not run in the process yet, and so is in no
    statistic; it decides Note [cut launches] (None: not timed here)."""

    median_ms: float
    p25_ms: float
    p75_ms: float
    min_ms: float
    samples: int
    launches_per_sample: int
    method: str
    spread: float
    warmup_launches: int = 0
    note: str = ""
    eager: Optional["Timing"] = None
    first_ms: Optional[float] = None

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY_SPREAD

    @classmethod
    def from_samples(cls, per_launch_ms, launches_per_sample: int, method: str,
                     warmup_launches: int = 0, note: str = "", eager_ms=(),
                     eager_calls: int = 0, first_ms: Optional[float] = None) -> "Timing":
        """Statistics (stats.timing_stats) of per-launch samples in ms, with those of
        the eager wall-clock loop's samples (``eager_ms``, per call, ``eager_calls``
        calls each) as ``eager`` when there are any; ``first_ms``: the first launch's."""
        st = timing_stats(per_launch_ms)
        eager = cls.from_samples(eager_ms, eager_calls, "wall") if len(eager_ms) else None
        return cls(median_ms=st["median_ms"], p25_ms=st["p25_ms"], p75_ms=st["p75_ms"],
                   min_ms=st["min_ms"], samples=st["samples"],
                   launches_per_sample=launches_per_sample, method=method,
                   spread=st["spread"], warmup_launches=warmup_launches, note=note,
                   eager=eager, first_ms=first_ms)




@dataclass
class EngineConfig(_Checked, StagedNotes, Record):
    """One cuDNN 9 engine config (an engine and its knob choices), built and timed by us.

    ``tag`` uses cudnn-frontend's/PyTorch's format, e.g. ``ConvFwd_eng46_k2=4_k5=2_k14=3``.
    ``status``: "OK", or the stage that stopped it ("config rejected", "build failed",
    "execute failed", "skipped: time budget") with ``message``. ``build_ms``: building
    the execution plan (run-time compilation included). ``check_ms``: checking its output
    against the reference, every check of it together (None: never checked).
    ``heuristic_ranks``: position
    (1-based) in cuDNN's heuristic modes A, B and FALLBACK, where listed.
    ``allowed``: whether PyTorch's rules (TF32 off excludes TENSOR_CORE for float32;
    deterministic excludes NONDETERMINISTIC) would let PyTorch use it at all."""

    tag: str
    engine: int
    knobs: List[Tuple[int, Signed]] = field(default_factory=list)  # [knob type id, value]
    status: str = ""
    message: str = ""
    numeric_notes: List[str] = field(default_factory=list)
    behavior_notes: List[str] = field(default_factory=list)
    workspace_bytes: Optional[int] = None
    build_ms: Optional[float] = None
    timing: Optional[Timing] = None
    max_error: Optional[float] = None
    tolerance: Optional[float] = None
    output_finite: Optional[bool] = None
    kernels: Optional[List[str]] = None
    heuristic_ranks: Dict[str, int] = field(default_factory=dict)
    allowed: bool = True
    # the staged search (Note [staged search] in core/staging.py): the round it left in
    # (its timing is that round's brief one, not checked) and its median over the round's
    # best then; None for a finalist, or a config of a search that was not staged
    left_round: Optional[int] = None
    left_ratio: Optional[float] = None
    check_ms: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    @property
    def time(self) -> Optional[float]:
        return self.timing.median_ms if self.timing is not None else None



@dataclass
class EngineSpace(Record):
    """Every engine of one direction's operation graph and the configs we tried.

    ``engines``: per engine {engine, status, knobs: [[type, min, max, stride]] (type: cuDNN's
    cudnnBackendKnobType_t), space: number of knob combinations, tried: candidates tried,
    rejected: those cuDNN refused as invalid for this problem (not listed in ``configs``),
    configs: valid ones (listed), untried: candidates left when the engine reached
    ``max_per_engine`` valid configs or the time budget ran out}. Candidates per engine:
    PyTorch's and the heuristics' configs, the engine's default, then every combination or,
    for a larger space, an evenly spaced sample, at most ``attempts_per_engine``."""

    engine_count: int = 0
    engines: List[dict] = field(default_factory=list)
    configs: List[EngineConfig] = field(default_factory=list)
    max_per_engine: int = 0
    attempts_per_engine: int = 0
    time_budget_s: Optional[float] = None
    budget_exhausted: bool = False
    wall_s: Optional[float] = None  # wall time of the whole exploration, worker restarts included
    legacy_map: Dict[str, List[str]] = field(default_factory=dict)  # "ALGO (MATH)" -> tags
    sampled: bool = True  # False: the listed configs only (no sampling of the knob space)
    # the staged search's rounds, when it was staged: per round {"round", "budget_ms",
    # "keep_within", "timed", "left", "wall_s"} (round 1's wall time includes listing and
    # building the configs), then the finalists' {"round": "final", "timed", "wall_s"}
    rounds: List[dict] = field(default_factory=list)
    # the configs' float64 reference was computed on the CPU: the worker's GPU had no room
    # for it (Note [reference on the CPU] in measure/tensors.py)
    reference_on_cpu: bool = False
    # seconds the worker spent listing the engines and building plans ahead, while the
    # legacy rows were measured (Note [engine search ahead]); not in wall_s or the rounds
    ahead_s: Optional[float] = None

    def ranked(self) -> List[EngineConfig]:
        return sorted(filter(rankable, self.configs), key=lambda c: c.time)

    def best(self, allowed_only: bool = False) -> Optional[EngineConfig]:
        r = [c for c in self.ranked() if c.allowed or not allowed_only]
        return r[0] if r else None

    def config(self, tag: str) -> Optional[EngineConfig]:
        return next((c for c in self.configs if c.tag == tag), None)

    @property
    def skipped(self) -> int:
        """Configs known to hang and not tried (Note [known hangs] in core/hangs.py): rows
        of ``configs`` that no search built or ran."""
        return sum(e.get("skipped", 0) for e in self.engines)


@dataclass
class PyTorchPick(_Checked, Record):
    """What PyTorch itself ran for one direction in one mode, measured in a fresh child
    process (times in ms, memory in bytes), with the same timing options and the same
    check against the float64 reference as our own rows.

    ``first_peak_alloc_bytes``: peak allocated during the first call, above what was
    allocated before it (the output included); ``first_reserved_growth_bytes``: growth of
    the caching allocator's reserve over that call. ``engine_tag``: the cudnn-frontend
    plan PyTorch cached (engine-API path); ``legacy_algo``: the algorithm its legacy path
    ran. ``same_kernels_as``: our legacy rows that launch exactly the same kernels."""

    label: str
    mode: str                       # benchmark | heuristic | deterministic
    api: str                        # "engine" (cudnn-frontend) | "legacy"
    benchmark_limit: Optional[int] = None
    error: str = ""                 # why this mode has no result
    first_call_ms: Optional[float] = None
    first_peak_alloc_bytes: Optional[int] = None
    first_reserved_growth_bytes: Optional[Signed] = None  # the reserve can also shrink
    steady: Optional[Timing] = None
    steady_peak_alloc_bytes: Optional[int] = None
    kernels: List[str] = field(default_factory=list)
    engine_tag: Optional[str] = None
    plan_workspace_bytes: Optional[int] = None
    numeric_notes: List[str] = field(default_factory=list)
    behavior_notes: List[str] = field(default_factory=list)
    heuristic_candidates: int = 0
    fallback_candidates: int = 0
    candidates: List[dict] = field(default_factory=list)  # tag, notes, workspace, source
    timed: List[Tuple[str, float]] = field(default_factory=list)  # [tag, ms] per timed plan
    legacy_algo: Optional[str] = None
    deterministic: Optional[bool] = None
    same_kernels_as: List[str] = field(default_factory=list)
    max_error: Optional[float] = None
    tolerance: Optional[float] = None
    output_finite: Optional[bool] = None

    @property
    def ok(self) -> bool:
        """The mode ran and we know what PyTorch chose (steady is None without re-timing)."""
        return not self.error

    @property
    def time(self) -> Optional[float]:
        """Steady-state median per call in ms (None: not re-timed)."""
        return self.steady.median_ms if self.steady is not None else None

    def largest_candidate(self) -> Optional[dict]:
        return max(self.candidates, key=lambda c: c.get("workspace_bytes", 0), default=None)


@dataclass
class AlgoResult(_Checked, StagedNotes, Record):
    """One (algorithm, math type) row from cudnnFind*Ex or cudnnGet*_v7.

    ``time_ms``: cudnnFind's own single measurement in milliseconds (None for heuristic
    rows and for rows that did not run). ``workspace_bytes``: the workspace the row
    reports. ``status``: cuDNN's status name. ``note``: why a row did not run, when we
    know (e.g. it needs more workspace than it was given).
    """

    algo: int
    algo_name: str
    math_type: str
    status: str
    status_code: int
    time_ms: Optional[float]
    workspace_bytes: int
    deterministic: bool
    note: str = ""
    timing: Optional[Timing] = None      # our re-timing (None: not re-timed)
    max_error: Optional[float] = None    # max |out - ref| / max |ref| vs float64 reference
    tolerance: Optional[float] = None    # the bound max_error is held to
    output_finite: Optional[bool] = None  # False: NaN/Inf in the output (then WRONG)
    peak_tflops: Optional[float] = None  # arithmetic ceiling for this dtype and math type
    peak_unit: str = ""
    kernels: Optional[List[str]] = None  # GPU kernels one launch runs (measure/kernels.py)
    found_under: str = ""                # the descriptor math type of the Find call
    pytorch_candidate: Optional[bool] = None  # among the rows PyTorch's legacy path picks
    # from (its Find call, under its math type); None: files older than schema 6
    left_round: Optional[int] = None     # the staged search's round it left in (None: a
    left_ratio: Optional[float] = None   # finalist), and its median over that round's best

    @property
    def ok(self) -> bool:
        return self.status == SUCCESS

    @property
    def time(self) -> Optional[float]:
        """The time to rank by, in ms: our re-timed median, else cudnnFind's own."""
        return self.timing.median_ms if self.timing is not None else self.time_ms

    @property
    def find_ratio(self) -> Optional[float]:
        """cudnnFind's time / our re-timed median."""
        if self.timing is None or self.time_ms is None or self.timing.median_ms <= 0:
            return None
        return self.time_ms / self.timing.median_ms

    @property
    def find_disagrees(self) -> bool:
        r = self.find_ratio
        return r is not None and abs(r - 1.0) > FIND_DISAGREE

    @property
    def key(self):
        return (self.algo, self.math_type)


@dataclass
class WorkspaceEntry(Record):
    """cudnnGet*WorkspaceSize for one (algorithm, math type); bytes None if it failed."""

    algo: int
    algo_name: str
    math_type: str
    status: str
    bytes: Optional[int]


@dataclass
class DirectionResult(Record):
    """Everything the legacy API says about one direction of the problem."""

    direction: str                   # fwd | bwd-data | bwd-filter
    math_type: str                   # the descriptor's math type during Find
    find: List[AlgoResult]           # in cuDNN's order (fastest first)
    heuristics: List[AlgoResult]     # cudnnGet*_v7 order
    workspace: List[WorkspaceEntry]  # every (algorithm, math type)
    workspace_needed_bytes: int      # max over successful workspace queries
    workspace_given_bytes: int       # what Find was given
    workspace_cap_bytes: Optional[int] = None  # --max-workspace, if any
    find_requested: int = 0
    find_returned: int = 0
    find_wall_ms: Optional[float] = None  # host wall time of the Find call alone
    flops: Optional[int] = None           # see analysis.flops
    min_bytes: Optional[int] = None       # see analysis.min_bytes
    pytorch: List[PyTorchPick] = field(default_factory=list)  # PyTorch's own choices
    engines: Optional[EngineSpace] = None  # cuDNN 9 engine configs, when explored
    searched_math_types: List[str] = field(default_factory=list)  # Find's calls, in order
    find_errors: List[str] = field(default_factory=list)  # "MATH: status" of refused calls
    find_wall_ms_all: Optional[float] = None  # every Find call together
    workspace_free_bytes: Optional[int] = None  # set when the GPU had less free than needed
    error: str = ""  # why this direction has no rows (e.g. out of GPU memory)
    # where the direction's wall time went (s): Find, the legacy rows' re-timing and checks
    # (their process's start included); the engine configs (their worker's start included)
    legacy_wall_s: Optional[float] = None
    engines_wall_s: Optional[float] = None
    # the legacy rows' staged search, when it was staged: per round {"round", "timed",
    # "left", "wall_s"} (round 1's wall time includes the kernels' names), then the
    # finalists' {"round": "final", "timed", "wall_s"}; Find is not in them
    legacy_rounds: List[dict] = field(default_factory=list)
    # the rows' float64 reference was computed on the CPU: the GPU had no room for it
    # (Note [reference on the CPU] in measure/tensors.py)
    reference_on_cpu: bool = False
    # within legacy_wall_s (s): making the direction's tensors and float64 reference, and
    # checking rows against it (inside the rounds, or the re-timing when not staged)
    legacy_setup_s: Optional[float] = None
    legacy_checks_s: Optional[float] = None

    def rankable(self, r: AlgoResult) -> bool:
        return rankable(r)

    def ranked(self) -> List[AlgoResult]:
        """Successful, correct rows fastest first (by re-timed median where there is
        one); then WRONG rows by time; then rows that did not run, in cuDNN's order."""
        good = sorted((r for r in self.find if self.rankable(r)), key=lambda r: r.time)
        wrong = sorted((r for r in self.find if r.ok and r.time is not None
                        and r.correct is False), key=lambda r: r.time)
        rest = [r for r in self.find if not (r.ok and r.time is not None)]
        return good + wrong + rest

    def pytorch_pick(self, mode: str, api: Optional[str] = "engine") -> Optional[PyTorchPick]:
        """The first of PyTorch's picks that ran in ``mode`` through ``api`` ("engine",
        "legacy"; None: either). For "benchmark" that is the run at the requested
        benchmark_limit (measure.pytorch_picks.default_modes puts it first)."""
        return next((p for p in self.pytorch if p.ok and p.mode == mode
                     and api in (None, p.api)), None)

    def pick_timing(self, pick: PyTorchPick) -> Optional[Timing]:
        """``pick``'s steady-state timing: its own child's re-timing, else ours of the
        engine config with its tag (a model's children run the whole model and re-time no
        single call; the same plan runs the same kernels)."""
        if pick.steady is not None:
            return pick.steady
        return self.config_timing(pick.engine_tag)

    def config_timing(self, tag: Optional[str]) -> Optional[Timing]:
        """Our steady-state timing of the engine config ``tag``; None when it was not
        explored, did not run or is not rankable."""
        c = self.engines.config(tag) if self.engines is not None and tag else None
        return c.timing if c is not None and rankable(c) else None

    def pick_ms(self, pick: Optional[PyTorchPick]) -> Optional[float]:
        """The steady-state median of pick_timing, ms; None without a pick or a time."""
        t = self.pick_timing(pick) if pick is not None else None
        return t.median_ms if t is not None else None

    def full_search_pick(self) -> Optional[PyTorchPick]:
        """PyTorch's benchmark pick with benchmark_limit 0 (every candidate timed), when
        that was a run of its own beside the one at the requested limit."""
        first = self.pytorch_pick("benchmark")
        return next((p for p in self.pytorch if p.ok and p.mode == "benchmark"
                     and p.api == "engine" and p.benchmark_limit == 0 and p is not first),
                    None)

    def best(self, pytorch_only: bool = False) -> Optional[AlgoResult]:
        """The fastest successful row that is not WRONG, or None; with ``pytorch_only``,
        among the rows PyTorch's legacy path chooses from (its math type's Find call)."""
        return next((r for r in self.ranked() if self.rankable(r) and (
            not pytorch_only or r.pytorch_candidate is not False)), None)

    def tflops(self, r: AlgoResult) -> Optional[float]:
        if self.flops is None or r.time is None or r.time <= 0:
            return None
        return self.flops / (r.time * 1e-3) / 1e12

    def gbs(self, r: AlgoResult) -> Optional[float]:
        if self.min_bytes is None or r.time is None or r.time <= 0:
            return None
        return self.min_bytes / (r.time * 1e-3) / 1e9

    def peak_pct(self, r: AlgoResult) -> Optional[float]:
        t = self.tflops(r)
        if t is None or not r.peak_tflops:
            return None
        return 100.0 * t / r.peak_tflops

    def heuristic_rank(self, row: AlgoResult) -> Optional[int]:
        for i, h in enumerate(self.heuristics, 1):
            if h.key == row.key:
                return i
        return None

    def workspace_for(self, algo: int, math_type: str) -> Optional[int]:
        for w in self.workspace:
            if w.algo == algo and w.math_type == math_type:
                return w.bytes
        return None


    @classmethod
    def from_dict(cls, d: dict, path: str = "") -> "DirectionResult":
        # find, heuristics and workspace are required fields: absent lists load as empty.
        path = path or cls.__name__
        if not isinstance(d, dict):
            raise UserError(f"{path}: expected an object, got {shown(d)}")
        if d.get("direction") not in DIRECTIONS:
            raise UserError(f"{path}.direction: {shown(d.get('direction'))} is not one of "
                            f"{', '.join(DIRECTIONS)}")
        return super().from_dict({"find": [], "heuristics": [], "workspace": [], **d}, path)
