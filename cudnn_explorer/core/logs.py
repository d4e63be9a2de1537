"""Parsers for the logs that show what PyTorch chose. Pure Python, tested on real logs
saved from the H200 (tests/fixtures).

* cudnn-frontend's log (``CUDNN_FRONTEND_LOG_INFO=1``, ``CUDNN_FRONTEND_LOG_FILE``), written
  by PyTorch's engine-API path (aten/src/ATen/native/cudnn/Conv_v8.cpp): per search, the
  candidate engine configs (heuristics, then fallbacks) with numerical and behaviour notes
  and workspace, then, with benchmark on, one ``Plan <tag> took <ms>`` line per timed plan.
* cuDNN's API log (``CUDNN_LOGLEVEL_DBG=3``, ``CUDNN_LOGDEST_DBG``) on PyTorch's legacy path
  (``TORCH_CUDNN_V8_API_DISABLED=1``): every cudnnConvolution{Forward,BackwardData,
  BackwardFilter} call names its algorithm and the descriptor's math type.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

__all__ = [
    "OPERATIONS", "EngineTag", "parse_tag", "format_tag", "Candidate", "FrontendSearch",
    "parse_frontend_log", "ApiConvCall", "parse_api_log", "legacy_choice",
]

# cudnn-frontend tag prefix <-> our direction names.
OPERATIONS = {"ConvFwd": "fwd", "ConvBwdData": "bwd-data", "ConvBwdFilter": "bwd-filter"}

_TAG = re.compile(r"^(ConvFwd|ConvBwdData|ConvBwdFilter)_eng(\d+)((?:_k\d+=-?\d+)*)$")


@dataclass(frozen=True)
class EngineTag:
    """An engine config as cudnn-frontend names it: ``ConvFwd_eng46_k2=4_k5=2_k14=3``."""

    operation: str             # ConvFwd | ConvBwdData | ConvBwdFilter
    engine: int                # global engine index
    knobs: Tuple[Tuple[int, int], ...] = ()  # (knob type id, value), in tag order

    @property
    def direction(self) -> str:
        return OPERATIONS[self.operation]

    def __str__(self) -> str:
        return format_tag(self)


def parse_tag(tag: str) -> EngineTag:
    """Parse a cudnn-frontend plan tag; ValueError if it is not one."""
    m = _TAG.match(tag.strip())
    if not m:
        raise ValueError(f"not an engine config tag: {tag!r}")
    knobs = tuple((int(k), int(v)) for k, v in re.findall(r"_k(\d+)=(-?\d+)", m.group(3)))
    return EngineTag(m.group(1), int(m.group(2)), knobs)


def format_tag(t: EngineTag) -> str:
    return f"{t.operation}_eng{t.engine}" + "".join(f"_k{k}={v}" for k, v in t.knobs)


@dataclass
class Candidate:
    """One engine config PyTorch considered, as its execution plan was logged."""

    tag: str
    numeric_notes: List[str] = field(default_factory=list)   # e.g. TENSOR_CORE, FFT
    behavior_notes: List[str] = field(default_factory=list)  # e.g. RUNTIME_COMPILATION
    workspace_bytes: int = 0
    status: str = ""     # from "Added plan <tag> <status>" (benchmark mode); "" if not logged
    source: str = ""     # "heuristic" or "fallback" (by position in the generator output)

    @property
    def deterministic(self) -> bool:
        return "NONDETERMINISTIC" not in self.numeric_notes


@dataclass
class FrontendSearch:
    """One PyTorch plan search (one direction of one problem) in a cudnn-frontend log."""

    operation: str
    heuristic_count: int = 0   # configs from the heuristics generator
    fallback_count: int = 0    # configs from the fallback generator (benchmark mode only)
    candidates: List[Candidate] = field(default_factory=list)
    timed: List[Tuple[str, float]] = field(default_factory=list)   # (tag, ms), log order
    failed: List[Tuple[str, str]] = field(default_factory=list)    # (tag, status)
    benchmarked: bool = False  # an auto-tuning run happened ("Plan ... took" lines)

    @property
    def direction(self) -> str:
        return OPERATIONS[self.operation]

    def candidate(self, tag: str) -> Optional[Candidate]:
        return next((c for c in self.candidates if c.tag == tag), None)

    @property
    def winner(self) -> Optional[str]:
        """The plan PyTorch cached. With benchmarking: the fastest timed plan, and of
        plans timed alike the first timed (Note [tied plans]); failed ones are logged as
        failed and left out. Without: the last plan built, since PyTorch builds configs
        in heuristic order and stops at the first that works."""
        if self.benchmarked:
            tied = self.tied
            return tied[0] if tied else None
        return self.candidates[-1].tag if self.candidates else None

    # Note [tied plans]: cudnn-frontend's time_sorted_plan (cudnn_frontend_find_plan.h)
    # keeps the timed plans in a std::set ordered by time alone, so a plan whose time
    # equals one already in the set is not inserted: of plans timed alike only the first
    # timed reaches PyTorch, which runs the sorted plans in order and caches the first
    # that runs. Times are CUDA-event readings (multiples of 32 ns on the H200), so small
    # kernels tie often (two of thirty ResNet-50 fp16 plans in one fixture log). Taking
    # the tie's smallest tag instead named a plan PyTorch never ran: on the H200 its
    # kernels were not those PyTorch launched. The log prints 6 significant digits, so
    # plans of 10 ms or more may read alike and differ in the float PyTorch compared.
    @property
    def tied(self) -> List[str]:
        """The timed plans, not failed, at the fastest logged time, in the order they
        were timed (the first is the winner; more than one: the log's times tie)."""
        bad = {t for t, _ in self.failed}
        ok = [(t, ms) for t, ms in self.timed if t not in bad]
        if not ok:
            return []
        best = min(ms for _, ms in ok)
        return [t for t, ms in ok if ms == best]

    def largest_workspace(self) -> Optional[Candidate]:
        return max(self.candidates, key=lambda c: c.workspace_bytes, default=None)


_PLAN = re.compile(
    r"CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : (\S+?), numeric_notes:\[([^\]]*)\] "
    r"behavior_notes:\[([^\]]*)\] workSpaceSize: (\d+)")
_ADDED = re.compile(r"\] Added plan (\S+) (\S+)\s*$")
_TOOK = re.compile(r"\] Plan (\S+) took\s+([0-9.eE+-]+)")
_FAILED = re.compile(r"\] Plan (\S+) failed with (\S+)")
_PRODUCED = re.compile(r"Called engine config generator and produced (\d+) configs")
_SECTION = re.compile(r"^Tag: (ConvFwd|ConvBwdData|ConvBwdFilter)_\s*$")


def _notes(text: str, prefix: str) -> List[str]:
    return [n.strip().replace(prefix, "") for n in text.split(",") if n.strip()]


def parse_frontend_log(text: str) -> List[FrontendSearch]:
    """Every plan search in a cudnn-frontend log, in order."""
    searches: List[FrontendSearch] = []
    cur: Optional[FrontendSearch] = None
    generators = 0
    fallback_next = False
    for line in text.splitlines():
        m = _SECTION.match(line)
        if m:
            cur = FrontendSearch(m.group(1))
            searches.append(cur)
            generators = 0
            fallback_next = False
            continue
        if cur is None:
            continue
        if "CUDNN_BACKEND_FALLBACK ENGINES" in line:
            fallback_next = True
            continue
        m = _PRODUCED.search(line)
        if m:
            n = int(m.group(1))
            if fallback_next or generators >= 1:
                cur.fallback_count += n
            else:
                cur.heuristic_count += n
            generators += 1
            continue
        m = _PLAN.search(line)
        if m:
            src = "heuristic" if len(cur.candidates) < cur.heuristic_count else "fallback"
            cur.candidates.append(Candidate(
                tag=m.group(1), numeric_notes=_notes(m.group(2), "CUDNN_NUMERICAL_NOTE_"),
                behavior_notes=_notes(m.group(3), "CUDNN_BEHAVIOR_NOTE_"),
                workspace_bytes=int(m.group(4)), source=src))
            continue
        m = _ADDED.search(line)
        if m:
            c = cur.candidate(m.group(1))
            if c is not None and not c.status:
                c.status = m.group(2)
            continue
        m = _TOOK.search(line)
        if m:
            cur.timed.append((m.group(1), float(m.group(2))))
            cur.benchmarked = True
            continue
        m = _FAILED.search(line)
        if m:
            cur.failed.append((m.group(1), m.group(2)))
            cur.benchmarked = True
    return searches


# ---------------------------------------------------------------------- cuDNN API log
_API_CALL = re.compile(r"^[IWE]! CuDNN \([^)]*\) function (cudnn\w+)\(\) called:")
_API_ALGO = re.compile(r"algo: type=\w+; val=CUDNN_CONVOLUTION_(?:FWD|BWD_DATA|BWD_FILTER)_ALGO_"
                       r"(\w+) \((\d+)\)")
_API_MATH = re.compile(r"mathType: type=cudnnMathType_t; val=CUDNN_(\w+) \(\d+\)")
_API_WS = re.compile(r"workSpaceSizeInBytes: type=size_t; val=(\d+)")
_CONV_CALLS = {"cudnnConvolutionForward": "fwd", "cudnnConvolutionBackwardData": "bwd-data",
               "cudnnConvolutionBackwardFilter": "bwd-filter"}


@dataclass(frozen=True)
class ApiConvCall:
    """One cudnnConvolution* call in cuDNN's API log."""

    direction: str
    algo_name: str      # e.g. IMPLICIT_PRECOMP_GEMM, 0 -> "ALGO_0" style as in our tables
    algo: int
    math_type: str      # e.g. DEFAULT_MATH
    workspace_bytes: int


def _algo_name(raw: str) -> str:
    # The API log spells bwd algorithms as ALGO_0 -> enum suffix "0"; ours say "ALGO_0".
    return f"ALGO_{raw}" if raw.isdigit() else raw


def parse_api_log(text: str) -> List[ApiConvCall]:
    """Every cudnnConvolution{Forward,BackwardData,BackwardFilter} call, in order."""
    calls: List[ApiConvCall] = []
    fn: Optional[str] = None
    block: List[str] = []

    def flush():
        if fn in _CONV_CALLS:
            body = "\n".join(block)
            a, m, w = _API_ALGO.search(body), _API_MATH.search(body), _API_WS.search(body)
            if a:
                d = _CONV_CALLS[fn]
                calls.append(ApiConvCall(d, _algo_name(a.group(1)), int(a.group(2)),
                                         m.group(1) if m else "", int(w.group(1)) if w else 0))

    for line in text.splitlines():
        m = _API_CALL.match(line)
        if m:
            flush()
            fn, block = m.group(1), []
        elif fn is not None:
            block.append(line)
    flush()
    return calls


def legacy_choice(calls: List[ApiConvCall], direction: str) -> Optional[ApiConvCall]:
    """The algorithm PyTorch's legacy path ran for ``direction``: the most frequent
    (algorithm, math type) among its calls (cudnnFind itself logs no such calls)."""
    mine = [c for c in calls if c.direction == direction]
    if not mine:
        return None
    (key, _), = Counter((c.algo, c.math_type) for c in mine).most_common(1)
    return next(c for c in mine if (c.algo, c.math_type) == key)
