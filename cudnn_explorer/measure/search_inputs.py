"""What one direction's engine search (measure/engines.py) is given, as records built once:
the direction's data, the search's settings, how its caller follows it, and how one config
is run. The work a worker does ahead of a search (its Listing and plans) is
engines.PreparedSearch, beside the functions that make it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ..core.knobs import Knobs
from ..core.options import TimingSpec
from ..core.problem import ConvProblem

__all__ = ["DirectionData", "SearchSettings", "Supervision", "ConfigRun"]


@dataclass(frozen=True)
class DirectionData:
    """One direction of a problem and the data its configs run on: ``native`` (the
    problem as the extension takes it; None with a test's fake search), ``tensors``
    (x, w and y; each config writes the direction's output, OUTPUT_OF in
    measure/tensors.py) and ``ref``, the reference output each config is checked
    against (None: none is checked)."""

    problem: ConvProblem
    direction: str
    native: Any = None
    tensors: Any = None
    ref: Any = None


@dataclass(frozen=True)
class SearchSettings:
    """How a direction's engine search goes (explore_engines' docstring says what each
    does): the legacy rows to map to configs, ``max_per_engine`` valid configs per engine
    within ``time_budget_s`` (None: no budget), each timed as ``timing`` says, their
    kernels read (``kernels``), the preferred tags first, the knob space sampled
    (``sample``), a staged search (``staged``) whose final round always holds
    ``finalist_tags``, only the preferred tags (``only_preferred``), and configs known to
    hang not sampled (``skip_known_hangs``)."""

    legacy_rows: Sequence = ()
    max_per_engine: int = 8
    time_budget_s: Optional[float] = 120.0
    timing: TimingSpec = TimingSpec()
    kernels: bool = True
    preferred_tags: Sequence[str] = ()
    sample: bool = True
    staged: bool = False
    finalist_tags: Optional[Sequence[str]] = None
    only_preferred: bool = False
    skip_known_hangs: bool = True


@dataclass(frozen=True)
class Supervision:
    """How a search's caller (a worker's parent, through its events) follows and steers
    it: ``progress`` hears messages, ``on_event`` the events (module doc of
    measure/engine_worker.py), ``known_hang(engine, knobs)`` says why a config is known
    to hang (core/hangs.py) or None, and ``prior`` is what earlier workers did
    (core/engine_prior.py), taken as done."""

    progress: Optional[Callable[[str], None]] = None
    on_event: Optional[Callable[[dict], None]] = None
    known_hang: Optional[Callable[[int, Knobs], Optional[str]]] = None
    prior: Optional[dict] = None

    def say(self, message: str) -> None:
        """Hand ``message`` to ``progress``, if there is one."""
        if self.progress is not None:
            self.progress(message)

    def emit(self, event: dict) -> None:
        """Hand ``event`` to ``on_event``, if there is one."""
        if self.on_event is not None:
            self.on_event(event)


@dataclass(frozen=True)
class ConfigRun:
    """How one config is run (engines._run_config): timed as ``timing`` says (when
    ``timing.retime``), a launch slower than ``cutoff_ms`` > 0 ending its timing (Note
    [cut launches] in csrc/timing.cpp), its kernels read with ``kernels``, and, with
    ``records``, checked only when its time beats ``records_over`` (Note [records
    checked] in core/staging.py)."""

    timing: TimingSpec
    kernels: bool
    cutoff_ms: float = 0.0
    records_over: Optional[float] = None
    records: bool = False
