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
import re
from dataclasses import asdict, dataclass, field, fields
from typing import Optional, Tuple

from .errors import UserError
from .problem import DIRECTIONS, clip, told


def flag(value, name: str) -> bool:
    """``value`` as a yes/no keyword: True or False (numpy's bool too); UserError for
    anything else: "no" is true to Python and would do the opposite of what it says."""
    if isinstance(value, bool) or (type(value).__module__ == "numpy" and
                                   type(value).__name__ in ("bool", "bool_")):
        return bool(value)
    raise UserError(f"{name} {told(value)}: valid: True or False")

__all__ = ["ExploreOptions", "TimingSpec", "PROFILES", "MODEL_PROFILES", "profile_name",
           "kept_fields", "given_options", "parse_int"]


INT32_MAX = 2**31 - 1
DAY_S = 86400.0


def _option(default, flag: str, what: str, kind: str, lo: float = 0, strict: bool = False,
            optional: bool = False, hi: float = INT32_MAX):
    """A field with its default, its command-line flag, what is valid, and how a value is
    read: ``kind`` "int", "float", "bool" or "directions"; numbers must be finite, >= ``lo``
    (> with ``strict``) and <= ``hi``; ``optional``: None is a valid value."""
    return field(default=default, metadata=dict(flag=flag, what=what, kind=kind, lo=lo,
                                                strict=strict, optional=optional, hi=hi))


@dataclass(frozen=True)
class TimingSpec:
    """How every row is timed: the part of the options that each measured path applies
    unchanged (see csrc/timing.h and measure/timing.py)."""

    retime: bool = True        # False: nothing is re-timed (legacy, engines, PyTorch)
    budget_ms: float = 100.0   # GPU sampling time per row, ms
    flush_l2: bool = False     # clear L2 before every timed launch (one launch per sample)
    graph: bool = True         # CUDA-graph replays (eager back-to-back launches if False)
    warmup_ms: float = 10.0    # launches before sampling starts
    eager: bool = True         # False: no eager wall-clock loop (a staged search's rounds)
    sample_ms: float = 1.0     # GPU time of one sample (K back-to-back launches), ms

    @property
    def eager_budget_ms(self) -> float:
        """Sampling time of the eager wall-clock loop beside the median: a quarter of the
        budget (not measured under flush_l2: a loop cannot clear L2 between calls without
        timing the clear; nor in a staged search's early rounds, whose times only rank)."""
        return 0.0 if self.flush_l2 or not self.retime or not self.eager else self.budget_ms / 4

    @property
    def method(self) -> str:
        """The method name every timed row reports when the options are honoured."""
        return "eager+flush" if self.flush_l2 else ("graph" if self.graph else "eager")


@dataclass(frozen=True)
class ExploreOptions:
    """Everything that steers :func:`cudnn_explorer.explore`, validated once."""

    directions: Tuple[str, ...] = _option(DIRECTIONS, "--direction",
                                          "fwd, bwd-data, bwd-filter or all", "directions")
    device: int = _option(0, "--device", "a CUDA device index >= 0", "int", hi=1023)
    seed: int = _option(0, "--seed", "an integer from 0 to 2**64-1", "int", hi=2**64 - 1)
    max_workspace_mib: Optional[float] = _option(None, "--max-workspace",
                                                 "a number of MiB from 0 to 2**30", "float",
                                                 optional=True, hi=2**30)
    retime: bool = _option(True, "--no-retime", "True or False", "bool")
    budget_ms: float = _option(100.0, "--budget-ms", "a number of ms from 0 to 600000",
                               "float", hi=600000.0)
    flush_l2: bool = _option(False, "--flush-l2", "True or False", "bool")
    graph: bool = _option(True, "--no-graph", "True or False", "bool")
    check: bool = _option(True, "--no-check", "True or False", "bool")
    pytorch: bool = _option(True, "--no-pytorch", "True or False", "bool")
    benchmark_limit: Optional[int] = _option(None, "--benchmark-limit",
                                             "an integer >= 0 (0 = every candidate)", "int",
                                             optional=True)
    child_timeout_s: float = _option(300.0, "--child-timeout",
                                     "a number of seconds > 0, at most 86400", "float",
                                     strict=True, hi=DAY_S)
    engines: bool = _option(True, "--no-engines", "True or False", "bool")
    engine_configs: int = _option(8, "--engine-configs", "an integer from 1 to 10000", "int",
                                  lo=1, hi=10000)
    engine_budget_s: Optional[float] = _option(120.0, "--engine-budget-s",
                                               "a number of seconds > 0, at most 86400",
                                               "float", strict=True, optional=True, hi=DAY_S)
    engine_config_timeout_s: float = _option(60.0, "--engine-config-timeout",
                                             "a number of seconds > 0, at most 86400",
                                             "float", strict=True, hi=DAY_S)
    # False: only the listed engine configs (PyTorch's candidates and cuDNN's heuristic
    # modes A and fallback, as PyTorch lists them), no sampling of the knob space, and
    # their kernels not read, so no map from legacy algorithms to configs (model
    # --profile quick).
    engine_sampling: bool = _option(True, "--profile", "True or False", "bool")
    # True (the quick profile, the default): legacy rows and engine configs are timed in
    # rounds, and only the finalists get the full budget (and, for engine configs, the
    # accuracy check: Note [staged search] in core/staging.py); False (the thorough
    # profile): every row and config gets both.
    staged: bool = _option(True, "--profile", "True or False", "bool")
    # False (a model sweep's quick profile): PyTorch's run of a model leaves out benchmark
    # mode with every candidate timed (benchmark_limit 0), as advise does; the sweep
    # itself times every candidate PyTorch lists. On the H200 that mode's process took
    # 9.4 s of a 125.7 s ResNet-50 sweep. A single problem's
    # children are not affected.
    every_candidate_mode: bool = _option(True, "--profile", "True or False", "bool")
    # False (a model sweep's quick profile): cudnnFind runs under PyTorch's math type only,
    # so the legacy rows are those PyTorch's legacy path chooses among, not every (algorithm,
    # math type) the dtype permits (Note [model legacy rows]).
    every_math_type: bool = _option(True, "--profile", "True or False", "bool")

    @classmethod
    def create(cls, source: str = "api", **kw) -> "ExploreOptions":
        """Options from keyword values (numbers, or the CLI's strings), defaults for the
        rest (None also means the default, except where None is itself valid); raises
        UserError naming the parameter (``source="api"``) or the flag (``source="cli"``)
        and what is valid."""
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(kw) - set(names))
        if unknown:
            raise UserError(f"unknown option {unknown[0]!r}; valid: {', '.join(names)}")
        values = {}
        for f in fields(cls):
            v = kw.get(f.name)
            if v is None and not (f.name in kw and f.metadata["optional"]):
                v = f.default
            values[f.name] = _parse(f, v, source)
        return cls(**values)

    def updated(self, source: str = "api", **kw) -> "ExploreOptions":
        """These options with ``kw`` changed, validated as create() validates them."""
        return ExploreOptions.create(source, **{**self.to_dict(), **kw})

    def profiled(self, profile: str, keep=(), model: bool = False) -> "ExploreOptions":
        """These options as ``profile`` sets them (PROFILES; MODEL_PROFILES for a model
        sweep, ``model``), except the fields named in ``keep`` (those the user chose).
        UserError for another name."""
        name = profile_name(profile)
        table = MODEL_PROFILES if model else PROFILES
        keep = kept_fields(keep)
        return self.updated(**{k: v for k, v in table[name].items() if k not in keep})

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
        if not isinstance(d, dict):
            raise UserError(f"options {told(d)}: expected an object of ExploreOptions fields")
        names = {f.name for f in fields(cls)}
        return cls.create(**{k: v for k, v in d.items() if k in names})


def kept_fields(keep) -> Tuple[str, ...]:
    """``keep`` (the ExploreOptions fields a profile leaves as given) as a tuple, or
    UserError naming it and what is valid."""
    names = {f.name for f in fields(ExploreOptions)}
    plain = not isinstance(keep, (str, bytes)) and hasattr(keep, "__iter__")
    kept = tuple(keep) if plain else ()
    if not plain or any(k not in names for k in kept):
        raise UserError(f"keep {told(keep)}: valid: a list of ExploreOptions field "
                        f"names, e.g. ['budget_ms']")
    return kept


def given_options(options) -> "ExploreOptions":
    """A job's ``options``: the defaults for None; UserError for what is not an
    ExploreOptions."""
    if options is None:
        return ExploreOptions.create()
    if not isinstance(options, ExploreOptions):
        raise UserError(f"options {type(options).__name__}: valid: an ExploreOptions "
                        f"(ExploreOptions.create(...))")
    return options


# How a profile sets the options. quick (the default): a staged search of the legacy rows
# and the engine configs (Note [staged search]); thorough: every row and config re-timed
# with the full budget and checked. A model sweep's quick stages the engine configs
# PyTorch's heuristics and fallbacks list: against the same configs each timed in full,
# its best config was within 2% for 69 of 69 ResNet-50 problem-directions on the H200
# (docs/benchmarks.md, 'The same answers'; finalists at 25 ms then).
# Note [model finalists' budget]: its finalists get 10 ms budgets (ten samples of 1 ms
# after 10 ms of warm-up): they rank configs within 8% of each other, and the median of
# ten samples whose spread (IQR / median) is at most 0.78%, as for 95% of configs in the
# three H200 sweeps of Note [staged search], has a standard error of about 0.23%
# (1.25 sigma / sqrt(10), sigma = IQR / 1.35), where the answers' bar is 2%; at 25 ms a
# finalist cost 42 ms of a ResNet-50 sweep's wall time, 20 s over its 482 finalists.
# Its thorough keeps every other option as given (each engine's knob space sampled,
# 100 ms budgets, no stages).
PROFILES = {"quick": dict(staged=True), "thorough": dict(staged=False)}
# Note [model legacy rows]: a model sweep's quick profile runs cudnnFind under PyTorch's
# math type only. In two H200 ResNet-50 sweeps (b32 AMP fp16 channels_last, 68
# directions each) the Find calls under every math type took 3.6 s, PyTorch's alone
# 1.0 s, and they returned 408 rows to time against 204; where a row of another math
# type was the best legacy row (30 and 41 of the 68 directions, each one found under
# TENSOR_OP_MATH_ALLOW_CONVERSION), PyTorch's math type's row of the same algorithm was
# within 5.2% of it (median 0.3-0.4%), and the report's best legacy row prefers
# PyTorch's candidates within 3% anyway (core/choices.py). A single problem's profiles
# and the model's thorough one keep every math type.
MODEL_PROFILES = {"quick": dict(staged=True, budget_ms=10.0, engine_budget_s=60.0,
                                engine_sampling=False, every_candidate_mode=False,
                                every_math_type=False),
                  "thorough": dict(staged=False)}
# The name the thorough profile had before the staged search (saved sweeps still say it).
OLD_NAMES = {"deep": "thorough"}


def profile_name(profile) -> str:
    """A profile's name as typed (any case), or UserError naming it and what is valid."""
    name = str(profile).strip().lower()
    if name not in PROFILES:
        raise UserError(f"--profile {clip(str(profile))}: valid: {', '.join(PROFILES)}")
    return name


def parse_int(text, flag: str, lo: int = 0, hi: int = 2**63 - 1) -> int:
    """An integer option as typed, or UserError naming ``flag`` and what is valid."""
    what = f"an integer >= {lo}" if hi >= 2**63 - 1 else f"an integer from {lo} to {hi}"
    return _parse_value(flag, dict(flag=flag, kind="int", lo=lo, strict=False,
                                   optional=False, hi=hi, what=what), text, "cli")


_INT = r"\s*[+-]?[0-9]{1,30}\s*"
_FLOAT = r"\s*[+-]?([0-9]{1,30}(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]{1,4})?\s*"


def _parse(f, v, source: str):
    """One option's value as ``f.metadata`` says, or UserError naming the parameter or the
    flag and what is valid."""
    return _parse_value(f.name, f.metadata, v, source)


def _parse_value(name: str, m, v, source: str):

    def bad() -> UserError:
        if source == "cli":  # the flag and the text as typed
            return UserError(f"{m['flag']} {clip(str(v))}: valid: {m['what']}")
        return UserError(f"{name} {told(v)}: valid: {m['what']}")

    kind = m["kind"]
    if v is None and m["optional"]:
        return None
    if kind == "bool":
        if not isinstance(v, bool):
            raise bad()
        return v
    if kind == "directions":
        dirs = v
        if isinstance(v, str):
            dirs = DIRECTIONS if v.strip().lower() == "all" else tuple(
                s.strip().lower() for s in v.split(","))
        try:
            dirs = tuple(dirs)
        except TypeError:
            raise bad() from None
        if not dirs or any(not isinstance(d, str) or d not in DIRECTIONS for d in dirs):
            raise bad()
        if len(set(dirs)) != len(dirs):
            twice = next(d for d in dirs if dirs.count(d) > 1)
            raise UserError(f"{m['flag'] if source == 'cli' else name} {v}: {twice} is "
                            f"listed twice; valid: {m['what']}")
        return dirs
    if isinstance(v, bool):
        raise bad()
    num = int(v) if kind == "int" and isinstance(v, float) and v.is_integer() else v
    if isinstance(num, str) and not re.fullmatch(_INT if kind == "int" else _FLOAT, num):
        raise bad()  # ASCII only: Python's int() and float() also read other scripts' digits
    try:
        x = int(str(num).strip()) if kind == "int" else float(num)
    except (TypeError, ValueError, OverflowError):
        raise bad() from None
    if not math.isfinite(x) or x < m["lo"] or (m["strict"] and x <= m["lo"]) or x > m["hi"]:
        raise bad()
    return x
