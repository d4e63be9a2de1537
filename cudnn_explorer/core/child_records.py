"""What our child processes send their parents: records with a schema and a version, read
with the same rules as the saved files (core/schema.py), so that a malformed or foreign
result is refused with the path of its bad field, and no layer writes another's format.

* ProblemChildResult: PyTorch's own call for one problem in one mode
  (measure/problem_child.py); the model layer builds the same record per problem from a
  run of the whole model, and the results store keeps it.
* ModelChildResult: PyTorch's own run of a whole model in one mode (model/mode_child.py).

A record without ``schema`` (the results store's, written before these had one) reads as
version 1. Pure Python (no torch import).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .errors import UserError
from .pin_report import PinCounts, PinReport
from .problem import ConvProblem
from .records import Timing
from .schema import Record, Signed, check_version, shown

__all__ = ["PROBLEM_CHILD_SCHEMA", "MODEL_CHILD_SCHEMA", "Checked", "FirstCall",
           "ProblemChildResult", "CallResult", "SizeResult", "ModelChildResult"]

PROBLEM_CHILD_SCHEMA = "cudnn_explorer.problem_child"
MODEL_CHILD_SCHEMA = "cudnn_explorer.model_child"
CHILD_VERSION = 1


class _Versioned(Record):
    """read(): schema and version checked, then every field."""

    SCHEMA = ""

    @classmethod
    def read(cls, d, what: str):
        if not isinstance(d, dict):
            raise UserError(f"{what}: expected an object, got {shown(d)}")
        schema = d.get("schema", cls.SCHEMA)
        if schema != cls.SCHEMA:
            raise UserError(f"{what}: schema is {shown(schema)}, not {cls.SCHEMA}")
        check_version(d.get("schema_version", CHILD_VERSION), (CHILD_VERSION,), f"{what}:")
        return cls.from_dict(d, what)


@dataclass(frozen=True)
class Checked(Record):
    """An output checked against the float64 reference (max_error None: not finite)."""

    max_error: Optional[float] = None
    tolerance: Optional[float] = None
    output_finite: Optional[bool] = None


@dataclass(frozen=True)
class FirstCall(Record):
    """One direction of PyTorch's own call: its first call (ms, the allocator's peak
    above what was allocated before, the reserve's growth), its steady state (a Timing,
    None without re-timing), the kernels it launched, its check, and the byte span of the
    log its first call wrote."""

    direction: str
    first_call_ms: float
    first_peak_alloc_bytes: Signed
    first_reserved_growth_bytes: Signed
    steady: Optional[Timing] = None
    steady_peak_alloc_bytes: Optional[Signed] = None
    kernels: List[str] = field(default_factory=list)
    check: Optional[Checked] = None
    log_span: List[Optional[int]] = field(default_factory=list)  # [None, None]: no log


@dataclass(frozen=True)
class ProblemChildResult(_Versioned):
    """PyTorch's own call for one problem in one mode: its ``settings`` (benchmark,
    deterministic, benchmark_limit, allow_tf32, ...), each direction's FirstCall, and the
    log the parent read (``log_text``: cudnn-frontend's or cuDNN's API log). Wall time
    (s): ``phases_s``, where the child's run went (measure/problem_child.py's PHASES);
    the parent's view, ``ready_wait_s`` (waiting for the child, started ahead, to finish
    its imports) and ``run_s`` (from its go to its end)."""

    SCHEMA = PROBLEM_CHILD_SCHEMA
    directions: List[FirstCall] = field(default_factory=list)
    settings: Dict[str, object] = field(default_factory=dict)
    torch: str = ""
    cudnn: Optional[int] = None
    log_text: str = ""
    phases_s: Dict[str, float] = field(default_factory=dict)
    ready_wait_s: Optional[float] = None
    run_s: Optional[float] = None
    schema: str = PROBLEM_CHILD_SCHEMA
    schema_version: int = CHILD_VERSION

    def direction(self, name: str) -> Optional[FirstCall]:
        return next((d for d in self.directions if d.direction == name), None)


@dataclass(frozen=True)
class CallResult(Record):
    """One convolution call of a model's first iteration, probed: its problem, direction
    and layer, whether it is its pass's first call of that problem and direction, its
    time (ms), the allocator's and the reserve's state around it, and its log's span."""

    problem: ConvProblem
    direction: str
    first: bool
    ms: float
    alloc_before: int
    peak_alloc: int
    reserved_before: int
    reserved_after: int
    layer: Optional[str] = ""
    peak_reserved: Optional[int] = None
    log_span: List[int] = field(default_factory=list)


@dataclass(frozen=True)
class SizeResult(Record):
    """One input size of a model's run: the first iteration (absent from a steady
    process's), its probed calls, and the steady iterations (ms each; ``steady_method``
    "eager" or "graph", ``steady_eager_ms`` the eager round beside a graph, ``steady_note``
    why not a graph); ``capture_failed``: why a whole-step capture failed, for the parent
    to try once more in a fresh process. In the pinned mode, the pinned op's own record of
    the first iteration (``pinned_first``) and of the eager steady iterations
    (``pinned_steady``, all of them together)."""

    input_shape: List[int]
    first_ms: Optional[float] = None
    before_alloc: Optional[int] = None
    before_reserved: Optional[int] = None
    first_peak_alloc: Optional[int] = None
    first_peak_reserved: Optional[int] = None
    other_peak_alloc: Optional[int] = None
    conv_calls: Optional[int] = None
    conv_ms: Optional[float] = None
    calls: List[CallResult] = field(default_factory=list)
    steady_ms: List[float] = field(default_factory=list)
    warmup: int = 0
    steady_method: str = "eager"
    steady_note: str = ""
    steady_eager_ms: List[float] = field(default_factory=list)
    steady_peak_alloc: Optional[int] = None
    steady_peak_reserved: Optional[int] = None
    capture_failed: Optional[str] = None
    pinned_first: Optional[PinCounts] = None
    pinned_steady: Optional[PinCounts] = None


@dataclass(frozen=True)
class ModelChildResult(_Versioned):
    """PyTorch's own run of a model in one mode: every input size that finished, and
    ``error`` (why it stopped, "" when it did not); in the pinned mode, what pinning did
    (``pin_report``); ``phases_s``, where its run went (model/mode_child.py's PHASES)."""

    SCHEMA = MODEL_CHILD_SCHEMA
    sizes: List[SizeResult] = field(default_factory=list)
    pin_report: Optional[PinReport] = None
    phases_s: Dict[str, float] = field(default_factory=dict)
    settings: Dict[str, object] = field(default_factory=dict)
    error: str = ""
    torch: str = ""
    cudnn: Optional[int] = None
    schema: str = MODEL_CHILD_SCHEMA
    schema_version: int = CHILD_VERSION
