"""One options object for an exploration, shared by the API and the CLI. Pure Python.

:class:`ExploreOptions` is frozen and validated once, by :meth:`ExploreOptions.create`.
Every measured path (legacy rows, engine configs, PyTorch's child processes) receives
the same object, so a timing option cannot reach one path and miss another; the
exploration's ``measurement`` records it. An error names the API parameter
(``budget_ms``), or the command-line flag (``--budget-ms``) when the call came from the
CLI.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Optional, Tuple

from .errors import UserError
from .problem import DIRECTIONS

__all__ = ["ExploreOptions", "TimingSpec"]


def _flag(name: str, flag: str, what: str):
    return field(metadata={"flag": flag, "what": what})


@dataclass(frozen=True)
class TimingSpec:
    """How every row is timed: the part of the options that each measured path applies
    unchanged (see csrc/timing.h and measure/timing.py)."""

    retime: bool = True        # False: nothing is re-timed (legacy, engines, PyTorch)
    budget_ms: float = 100.0   # GPU sampling time per row, ms
    flush_l2: bool = False     # clear L2 before every timed launch (one launch per sample)
    graph: bool = True         # CUDA-graph replays (eager back-to-back launches if False)
    warmup_ms: float = 10.0    # launches before sampling starts

    @property
    def eager_budget_ms(self) -> float:
        """Sampling time of the eager wall-clock loop beside the median: a quarter of the
        budget (not measured under flush_l2: a loop cannot clear L2 between calls without
        timing the clear)."""
        return 0.0 if self.flush_l2 or not self.retime else self.budget_ms / 4

    @property
    def method(self) -> str:
        """The method name every timed row reports when the options are honoured."""
        return "eager+flush" if self.flush_l2 else ("graph" if self.graph else "eager")


@dataclass(frozen=True)
class ExploreOptions:
    """Everything that steers :func:`cudnn_explorer.explore`, validated once."""

    directions: Tuple[str, ...] = _flag("directions", "--direction",
                                        "fwd, bwd-data, bwd-filter or all")
    device: int = _flag("device", "--device", "a CUDA device index >= 0")
    seed: int = _flag("seed", "--seed", "an integer >= 0")
    max_workspace_mib: Optional[float] = _flag("max_workspace_mib", "--max-workspace",
                                               "a finite number of MiB >= 0")
    retime: bool = _flag("retime", "--no-retime", "True or False")
    budget_ms: float = _flag("budget_ms", "--budget-ms", "a finite number of ms >= 0")
    flush_l2: bool = _flag("flush_l2", "--flush-l2", "True or False")
    graph: bool = _flag("graph", "--no-graph", "True or False")
    check: bool = _flag("check", "--no-check", "True or False")
    pytorch: bool = _flag("pytorch", "--no-pytorch", "True or False")
    benchmark_limit: Optional[int] = _flag("benchmark_limit", "--benchmark-limit",
                                           "an integer >= 0 (0 = every candidate)")
    child_timeout_s: float = _flag("child_timeout_s", "--child-timeout",
                                   "a finite number of seconds > 0")
    engines: bool = _flag("engines", "--no-engines", "True or False")
    engine_configs: int = _flag("engine_configs", "--engine-configs", "an integer >= 1")
    engine_budget_s: Optional[float] = _flag("engine_budget_s", "--engine-budget-s",
                                             "a finite number of seconds > 0")
    engine_config_timeout_s: float = _flag("engine_config_timeout_s", "--engine-config-timeout",
                                           "a finite number of seconds > 0")

    DEFAULTS = dict(directions=DIRECTIONS, device=0, seed=0, max_workspace_mib=None,
                    retime=True, budget_ms=100.0, flush_l2=False, graph=True, check=True,
                    pytorch=True, benchmark_limit=None, child_timeout_s=300.0, engines=True,
                    engine_configs=8, engine_budget_s=120.0, engine_config_timeout_s=60.0)

    @classmethod
    def create(cls, source: str = "api", **kw) -> "ExploreOptions":
        """Options from keyword values (numbers, or the CLI's strings), defaults for the
        rest; raises UserError naming the parameter (``source="api"``) or the flag
        (``source="cli"``) and what is valid."""
        names = {f.name: f for f in fields(cls)}
        unknown = sorted(set(kw) - set(names))
        if unknown:
            raise UserError(f"unknown option {unknown[0]!r}; valid: {', '.join(names)}")
        values = {**cls.DEFAULTS, **{k: v for k, v in kw.items() if v is not None or k in (
            "max_workspace_mib", "benchmark_limit", "engine_budget_s")}}

        def bad(name: str, value) -> UserError:
            f = names[name]
            if source == "cli":  # the flag and the text as typed
                return UserError(f"{f.metadata['flag']} {value}: valid: {f.metadata['what']}")
            return UserError(f"{name} {value!r}: valid: {f.metadata['what']}")

        def number(name, integer=False, lo=0.0, strict=False, optional=False):
            v = values[name]
            if v is None and optional:
                return None
            if isinstance(v, bool):
                raise bad(name, v)
            if integer and isinstance(v, float) and v.is_integer():
                v = int(v)
            try:
                x = int(str(v).strip()) if integer else float(v)
            except (TypeError, ValueError):
                raise bad(name, v) from None
            if not math.isfinite(x) or x < lo or (strict and x <= lo):
                raise bad(name, v)
            return x

        def flag(name):
            v = values[name]
            if not isinstance(v, bool):
                raise bad(name, v)
            return v

        dirs = values["directions"]
        if isinstance(dirs, str):
            dirs = DIRECTIONS if dirs.strip().lower() == "all" else tuple(
                s.strip().lower() for s in dirs.split(","))
        try:
            dirs = tuple(dirs)
        except TypeError:
            raise bad("directions", values["directions"]) from None
        if not dirs or any(d not in DIRECTIONS for d in dirs) or len(set(dirs)) != len(dirs):
            raise bad("directions", values["directions"])
        return cls(
            directions=dirs, device=number("device", integer=True),
            seed=number("seed", integer=True),
            max_workspace_mib=number("max_workspace_mib", optional=True),
            retime=flag("retime"), budget_ms=number("budget_ms"), flush_l2=flag("flush_l2"),
            graph=flag("graph"), check=flag("check"), pytorch=flag("pytorch"),
            benchmark_limit=number("benchmark_limit", integer=True, optional=True),
            child_timeout_s=number("child_timeout_s", strict=True),
            engines=flag("engines"),
            engine_configs=number("engine_configs", integer=True, lo=1),
            engine_budget_s=number("engine_budget_s", strict=True, optional=True),
            engine_config_timeout_s=number("engine_config_timeout_s", strict=True))

    @property
    def timing(self) -> TimingSpec:
        return TimingSpec(retime=self.retime, budget_ms=self.budget_ms,
                          flush_l2=self.flush_l2, graph=self.graph)

    @property
    def max_workspace_bytes(self) -> Optional[int]:
        return None if self.max_workspace_mib is None else int(self.max_workspace_mib * 2**20)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["directions"] = list(self.directions)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ExploreOptions":
        """Options as a saved exploration recorded them (unknown keys ignored)."""
        names = {f.name for f in fields(cls)}
        return cls.create(**{k: v for k, v in d.items() if k in names})
