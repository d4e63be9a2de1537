"""What pinning did: the layers it routed through the pinned convolution op, and, per
problem-direction, the calls that ran the plan file's engine config or fell back to
PyTorch's own convolution. Pure Python records (no torch import)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from .schema import Record

__all__ = ["PinReport", "PinnedDirection", "PinCounts", "PlanMade"]


@dataclass(frozen=True)
class PinReport(Record):
    """The result of pinning a model (or entering the pinned context): the plan file's
    ``source``, the ``plans`` it loaded, the ``layers`` now routed through the op
    (qualified names), the ``skipped`` ones ("name: why"), and the
    ``environment_differences`` that were overridden ([] when the file's environment is
    this one; "not checked: ..." when there is no GPU to compare with)."""

    source: str
    plans: int
    layers: List[str] = field(default_factory=list)
    skipped: List[str] = field(default_factory=list)
    environment_differences: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class PinnedDirection(Record):
    """One problem-direction the op ran (or a group of calls that never reached cuDNN,
    with ``key`` []): ``covered`` by the file or not, the file's ``tag`` and the plan that
    cudnn-frontend built for it (``ran``), host calls since the counts were reset by
    outcome, the last ``reason`` for a fallback, and the plan builds (``build_ms``
    their total wall time, ms). Calls replayed inside a CUDA graph are not host calls and
    are not counted."""

    key: List[int]
    description: str
    covered: bool
    tag: str = ""
    ran: str = ""
    pinned_calls: int = 0
    fallback_calls: int = 0
    reason: str = ""
    builds: int = 0
    build_ms: float = 0.0


@dataclass(frozen=True)
class PinCounts(Record):
    """The op's own record for the process since the counts were last reset."""

    directions: List[PinnedDirection] = field(default_factory=list)

    @property
    def pinned_calls(self) -> int:
        return sum(d.pinned_calls for d in self.directions)

    @property
    def fallback_calls(self) -> int:
        return sum(d.fallback_calls for d in self.directions)

    @property
    def calls(self) -> int:
        return self.pinned_calls + self.fallback_calls

    @property
    def fallbacks(self) -> List[PinnedDirection]:
        return [d for d in self.directions if d.fallback_calls]

    @property
    def plans_ran(self) -> List[str]:
        """Every (description, plan) that ran pinned, sorted: equal lists, equal plans."""
        return sorted(f"{d.description}: {d.ran}" for d in self.directions if d.pinned_calls)


@dataclass(frozen=True)
class PlanMade(Record):
    """How the plan of one problem-direction the file covers was made in this process:
    ``builds`` from its engine config, ``restored`` from its kept form (``kept_error``:
    why the last kept form was refused, so that it was built instead), ``build_ms`` the
    wall time of both (ms, on whichever thread made it: the caller's, or a builder's for
    plans built ahead), and ``waited_ms`` the time its first calls waited for a plan
    being built ahead (Note [plans built ahead] in csrc/pinned_plans.cpp);
    ``runtime_compiled``: its engine is compiled at run time (cuDNN's RUNTIME_COMPILATION
    note), so that building it compiles a kernel."""

    description: str
    tag: str
    builds: int = 0
    restored: int = 0
    build_ms: float = 0.0
    waited_ms: float = 0.0
    kept_error: str = ""
    runtime_compiled: bool = False
