"""Plan files: for every problem-direction of a sweep, the engine config to run, keyed as
PyTorch's own plan cache keys a convolution, with the environment it was measured in.

Schema ``cudnn_explorer.plans``, version 1. An entry holds the chosen engine config
(engine id, knobs, tag), its workspace, its measured steady median and why it was chosen.
Its key is what aten/src/ATen/native/cudnn/Conv_v8.cpp keys its plan cache on: the
tensors' sizes and strides (the layout), the dtype, padding, stride, dilation, groups, the
math type (TF32 allowed or not) and the deterministic flag. A file names its environment
(GPU and compute capability, cuDNN, cudnn-frontend, torch); one measured elsewhere is
refused, naming what differs, unless the user overrides it. Pure Python (no torch import).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import List, Optional, Sequence, Tuple

from .errors import UserError
from .exploration import Environment, cudnn_version
from .logs import OPERATIONS, parse_tag
from .problem import DIRECTIONS, ConvProblem
from .records import MIB, DirectionResult, EngineConfig, rankable
from .schema import Record, Signed, check_schema, parse_json, shown
from .targets import cudnn_strides

__all__ = ["PLANS_SCHEMA", "PLANS_VERSION", "POLICIES", "PlanKey", "PlanEntry",
           "PlanEnvironment", "PlanFile", "choose", "plans_from", "native_key", "native_key_of",
           "problem_of_key", "KEY_VERSION"]

PLANS_SCHEMA = "cudnn_explorer.plans"
PLANS_VERSION = 1
POLICIES = ("best", "pytorch")


@dataclass(frozen=True)
class PlanKey(Record):
    """A convolution as PyTorch's plan cache keys it, in cuDNN's terms (a 1-D problem as
    the 2-D one PyTorch passes to cuDNN)."""

    direction: str
    dtype: str
    x_dims: List[int]
    x_strides: List[int]
    w_dims: List[int]
    w_strides: List[int]
    y_dims: List[int]
    y_strides: List[int]
    padding: List[int]
    stride: List[int]
    dilation: List[int]
    groups: int
    math_type: str
    tf32: bool
    deterministic: bool

    @classmethod
    def of(cls, problem: ConvProblem, direction: str, deterministic: bool) -> "PlanKey":
        xs, ws, ys, pad, stride, dil = problem.cudnn_params()
        return cls(direction=direction, dtype=problem.dtype,
                   x_dims=list(xs), x_strides=list(cudnn_strides(xs, problem.layout)),
                   w_dims=list(ws), w_strides=list(cudnn_strides(ws, problem.layout)),
                   y_dims=list(ys), y_strides=list(cudnn_strides(ys, problem.layout)),
                   padding=list(pad), stride=list(stride), dilation=list(dil),
                   groups=problem.groups, math_type=problem.math_type,
                   tf32=bool(problem.tf32) if problem.dtype == "float32" else True,
                   deterministic=deterministic)

    @property
    def ident(self) -> str:
        """The key as one string (its lists make it unhashable): equal keys, equal idents."""
        # its fields as they are (lists of ints, strings, booleans): to_dict's asdict
        # deep-copies them, which was most of the time reading a plan file took
        return json.dumps({f.name: getattr(self, f.name) for f in fields(self)},
                          sort_keys=True)


@dataclass(frozen=True)
class PlanEntry(Record):
    """One problem-direction's plan: the engine config (``tag``, ``engine``, ``knobs`` as
    [knob type, value]), its workspace (bytes) and steady median (ms per call, as we
    re-timed it), why it was chosen, and where the model runs it (layers, calls per
    iteration), and the median of benchmark mode's pick as we re-timed it (``pytorch_ms``,
    where the sweep had one)."""

    key: PlanKey
    problem: ConvProblem
    tag: str
    engine: int
    knobs: List[Tuple[int, Signed]] = field(default_factory=list)
    workspace_bytes: int = 0
    median_ms: Optional[float] = None
    why: str = ""
    numeric_notes: List[str] = field(default_factory=list)
    behavior_notes: List[str] = field(default_factory=list)
    layers: List[str] = field(default_factory=list)
    calls: int = 0
    pytorch_ms: Optional[float] = None  # benchmark mode's pick, re-timed (ms per call)


KEY_VERSION = 1
_DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "float64": 3}


def native_key(entry: PlanEntry) -> List[int]:
    """The entry's key as the pinned convolution op computes it from a call: integers in
    the order of Note [plan keys] (csrc/pinned.h). The deterministic flag is not in it
    (deterministic mode checks the plan's own notes when it builds it)."""
    return _native(entry.key, entry.problem)


def native_key_of(problem: ConvProblem, direction: str) -> List[int]:
    """native_key of one direction of ``problem`` (the key the op gives its calls)."""
    return _native(PlanKey.of(problem, direction, False), problem)


def _native(k: PlanKey, problem: ConvProblem) -> List[int]:
    nd = len(k.x_dims)
    channels_last = problem.layout == "nhwc" and nd >= 4
    return [KEY_VERSION, DIRECTIONS.index(k.direction), _DTYPE_CODES[k.dtype], int(k.tf32),
            k.groups, int(channels_last), nd, *k.x_dims, *k.w_dims, *k.y_dims, *k.padding,
            *k.stride, *k.dilation]


def problem_of_key(key: Sequence[int]) -> Tuple[ConvProblem, str]:
    """(problem, direction) whose native_key_of is ``key`` (a key the op gave a call,
    Note [plan keys]); UserError naming the key when it is not one. Note [keys back to
    problems]: a key is cuDNN's view, so a 1-D problem and the 2-D one with H = 1, a
    1-high kernel, no padding, stride 1 and dilation 1 in H share a key; it comes back as
    the 1-D problem (the same cuDNN convolution either way). A transposed call's key is
    that of the convolution it is the adjoint of (its output a bwd-data)."""
    k = list(key)
    shown_key = str(k)[:60]
    if len(k) < 7 or any(not isinstance(v, int) or isinstance(v, bool) for v in k):
        raise UserError(f"key {shown_key}: not a list of integers in the op's key order")
    version, direction, dtype, tf32, groups, channels_last, nd = k[:7]
    sp = nd - 2
    if version != KEY_VERSION or nd not in (4, 5) or len(k) != 7 + 3 * nd + 3 * sp or \
            not 0 <= direction < len(DIRECTIONS) or dtype not in _DTYPE_CODES.values():
        raise UserError(f"key {shown_key}: not a version-{KEY_VERSION} key of the pinned op "
                        f"(Note [plan keys])")
    x, w = k[7:7 + nd], k[7 + nd:7 + 2 * nd]
    pad, stride, dil = (k[7 + 3 * nd + i * sp:7 + 3 * nd + (i + 1) * sp] for i in range(3))
    dtype_name = next(n for n, c in _DTYPE_CODES.items() if c == dtype)
    one_d = nd == 4 and not channels_last and x[2] == 1 and w[2] == 1 and pad[0] == 0 and \
        stride[0] == 1 and dil[0] == 1
    cut = 1 if one_d else 0
    try:
        problem = ConvProblem.create(
            [x[0], x[1], *x[2 + cut:]], out_channels=w[0], kernel=w[2 + cut:],
            stride=stride[cut:], padding=pad[cut:], dilation=dil[cut:], groups=groups,
            dtype=dtype_name, layout="nhwc" if channels_last else "nchw",
            tf32=bool(tf32) if dtype_name == "float32" else None)
    except UserError as e:
        raise UserError(f"key {shown_key}: not a convolution: {e}") from None
    d = DIRECTIONS[direction]
    if native_key_of(problem, d) != k:
        raise UserError(f"key {shown_key}: its sizes are not those of one convolution")
    return problem, d


@dataclass(frozen=True)
class PlanEnvironment(Record):
    """Where the plans were measured; a plan is only known to be valid there."""

    gpu_name: str = ""
    compute_capability: str = ""
    cudnn: str = ""
    cudnn_frontend: str = ""
    torch: str = ""

    @classmethod
    def of(cls, env: Environment) -> "PlanEnvironment":
        return cls(gpu_name=env.gpu_name, compute_capability=env.compute_capability,
                   cudnn=env.cudnn_runtime, cudnn_frontend=env.cudnn_frontend,
                   torch=env.torch_version)

    def differences(self, here: "PlanEnvironment") -> List[str]:
        """What differs between this (the file's) environment and ``here``, in words."""
        names = {"gpu_name": "GPU", "compute_capability": "compute capability",
                 "cudnn": "cuDNN", "cudnn_frontend": "cudnn-frontend", "torch": "torch"}
        out = []
        for f, what in names.items():
            a, b = getattr(self, f), getattr(here, f)
            if a != b:
                show = cudnn_version if f == "cudnn" else str
                out.append(f"{what} {show(b) or '?'} here, {show(a) or '?'} in the file")
        return out


@dataclass(frozen=True)
class PlanFile(Record):
    """The plans of one model (or of saved explorations) in one environment, chosen by
    ``policy`` under the filters (``max_workspace_bytes``, ``deterministic_only``);
    ``skipped``: the problem-directions without a plan, and why."""

    environment: PlanEnvironment
    entries: List[PlanEntry] = field(default_factory=list)
    policy: str = "best"
    max_workspace_bytes: Optional[int] = None
    deterministic_only: bool = False
    source: str = ""
    skipped: List[str] = field(default_factory=list)
    tool_version: str = ""
    created: str = ""
    schema: str = PLANS_SCHEMA
    schema_version: int = PLANS_VERSION

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    @property
    def predicted_gain_ms(self) -> Optional[float]:
        """ms per iteration the plans save over benchmark mode's picks, as the sweep timed
        both (sum over the entries of (pick - plan) x calls per iteration); None when no
        entry has both."""
        known = [e for e in self.entries if e.pytorch_ms is not None and e.median_ms is not None
                 and e.calls]
        return sum((e.pytorch_ms - e.median_ms) * e.calls for e in known) if known else None

    def entry(self, key: PlanKey) -> Optional[PlanEntry]:
        return next((e for e in self.entries if e.key == key), None)

    def differences(self, here: Environment) -> List[str]:
        """What differs between the file's environment and ``here``, in words."""
        return self.environment.differences(PlanEnvironment.of(here))

    def check_environment(self, here: Environment, override: bool = False) -> List[str]:
        """What differs from ``here``; UserError naming it unless ``override``."""
        diff = self.differences(here)
        if diff and not override:
            raise UserError(f"plan file from another environment: {'; '.join(diff)} "
                            f"(--allow-environment uses it anyway)")
        return diff

    @classmethod
    def read(cls, data, what: str = "plan file") -> "PlanFile":
        """A plan file's text or bytes, every field checked; UserError names the bad one."""
        d = parse_json(data)
        check_schema(d, PLANS_SCHEMA, (PLANS_VERSION,), "plan file")
        if "entries" not in d:  # no default: a file without them is not one of no plans
            raise UserError(f"{what}.entries: missing (a list of plans, [] for none)")
        plans = cls.from_dict(d, what)
        if plans.policy not in POLICIES:
            raise UserError(f"{what}.policy: {shown(plans.policy)}: valid: "
                            f"{', '.join(POLICIES)}")
        seen = set()
        for k, e in enumerate(plans.entries):
            at = f"{what}.entries[{k}]"
            if e.key.direction not in DIRECTIONS:
                raise UserError(f"{at}.key.direction: {shown(e.key.direction)} is not one "
                                f"of {', '.join(DIRECTIONS)}")
            if e.key != PlanKey.of(e.problem, e.key.direction, e.key.deterministic):
                raise UserError(f"{at}.key: not the key of its problem "
                                f"({e.problem.describe()})")
            try:
                tag = parse_tag(e.tag)
            except ValueError:
                raise UserError(f"{at}.tag: {shown(e.tag)} is not an engine config tag") \
                    from None
            if tag.direction != e.key.direction:
                want = next(op for op, d in OPERATIONS.items() if d == e.key.direction)
                raise UserError(f"{at}.tag: {e.tag} is a {tag.direction} engine config, "
                                f"in a {e.key.direction} plan; valid: a {want}_ tag")
            if tag.engine != e.engine or sorted(tag.knobs) != sorted(map(tuple, e.knobs)):
                raise UserError(f"{at}: engine {e.engine} and knobs {shown(e.knobs)} are "
                                f"not those of its tag {e.tag}")
            if e.key.ident in seen:
                raise UserError(f"{at}.key: a second plan for the same convolution")
            seen.add(e.key.ident)
        return plans


def _fits(c, cap: Optional[int], deterministic: bool) -> bool:
    return ((cap is None or (c.workspace_bytes or 0) <= cap)
            and not (deterministic and "NONDETERMINISTIC" in c.numeric_notes))


def choose(d: DirectionResult, policy: str = "best", max_workspace_bytes: Optional[int] = None,
           deterministic: bool = False) -> Tuple[Optional[EngineConfig], str]:
    """(the engine config to pin for one direction, why) under ``policy``: "best", the
    fastest re-timed, correct config PyTorch's rules allow; "pytorch", benchmark mode's
    own pick (deterministic mode's with ``deterministic``) as we re-timed it. Both within
    the workspace cap and, with ``deterministic``, without NONDETERMINISTIC configs.
    (None, why not) when there is none."""
    if policy not in POLICIES:
        raise UserError(f"policy {shown(policy)}: valid: {', '.join(POLICIES)}")
    if d.engines is None:
        return None, "no engine configs explored"
    cap = "" if max_workspace_bytes is None else \
        f", workspace at most {max_workspace_bytes / MIB:.2f} MiB"
    det = ", deterministic" if deterministic else ""
    if policy == "pytorch":
        mode = "deterministic" if deterministic else "benchmark"
        pick = d.pytorch_pick(mode)
        if pick is None or not pick.engine_tag:
            return None, f"no {mode} pick of PyTorch's with an engine config"
        c = d.engines.config(pick.engine_tag)
        if c is None or not rankable(c):
            return None, f"PyTorch's {mode} pick {pick.engine_tag} was not re-timed here"
        if not _fits(c, max_workspace_bytes, deterministic):
            return None, f"PyTorch's {mode} pick {c.tag} is outside the filters{cap}{det}"
        return c, f"PyTorch's {mode} pick, frozen: {c.time:.4f} ms re-timed"
    ok = [c for c in d.engines.ranked() if c.allowed and _fits(c, max_workspace_bytes,
                                                                deterministic)]
    if not ok:
        return None, f"no re-timed engine config PyTorch's rules allow{cap}{det}"
    best = ok[0]
    pick = d.pytorch_pick("benchmark")
    vs = ""
    if pick is not None and pick.engine_tag and d.config_timing(pick.engine_tag) is not None:
        t = d.config_timing(pick.engine_tag).median_ms
        vs = "; it is PyTorch's benchmark pick" if pick.engine_tag == best.tag else \
            f"; PyTorch's benchmark pick {pick.engine_tag}: {t:.4f} ms"
    return best, (f"fastest of {len(ok)} re-timed engine configs PyTorch's rules allow"
                  f"{cap}{det}: {best.time:.4f} ms{vs}")


def plans_from(items: Sequence[Tuple[ConvProblem, DirectionResult, List[str], int]],
               environment: Environment, source: str, policy: str = "best",
               max_workspace_bytes: Optional[int] = None, deterministic: bool = False,
               tool_version: str = "", created: str = "") -> PlanFile:
    """The PlanFile of ``items``: (problem, direction's result, layers, calls per
    iteration), each chosen by ``choose``; one plan per key (the first, in order)."""
    entries, skipped, seen = [], [], set()
    for problem, d, layers, calls in items:
        what = f"{problem.describe()} {d.direction}"
        c, why = choose(d, policy, max_workspace_bytes, deterministic)
        if c is None:
            skipped.append(f"{what}: {why}")
            continue
        key = PlanKey.of(problem, d.direction, deterministic)
        if key.ident in seen:
            continue
        seen.add(key.ident)
        pick = d.pytorch_pick("benchmark")
        t = d.config_timing(pick.engine_tag) if pick is not None and pick.engine_tag else None
        entries.append(PlanEntry(key=key, problem=problem, tag=c.tag, engine=c.engine,
                                 knobs=[list(kv) for kv in c.knobs],
                                 workspace_bytes=c.workspace_bytes or 0, median_ms=c.time,
                                 why=why, numeric_notes=list(c.numeric_notes),
                                 behavior_notes=list(c.behavior_notes), layers=list(layers),
                                 calls=calls, pytorch_ms=t.median_ms if t else None))
    return PlanFile(environment=PlanEnvironment.of(environment), entries=entries,
                    policy=policy, max_workspace_bytes=max_workspace_bytes,
                    deterministic_only=deterministic, source=source, skipped=skipped,
                    tool_version=tool_version, created=created)
