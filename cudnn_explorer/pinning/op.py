"""The pinned convolution op: its plans, its fake implementation and its counts.

``torch.ops.cudnn_explorer.conv`` and ``conv_backward`` are defined in C++ (Note [pinned
convolution op] in csrc/conv_op.cpp) when the native module loads; this module loads it,
registers their fake implementations (shapes and memory formats, Note [output layout],
for torch.compile and FakeTensor), hands a plan file's entries to the op and reads the
op's own record of what ran.
"""
from __future__ import annotations

import functools
from typing import List, Optional

from ..core.errors import UserError
from ..core.options import flag
from ..core.logs import parse_tag
from ..core.pin_report import PinCounts, PinnedDirection, PlanMade
from ..core.problem import output_shape
from ..core.plans import KEY_VERSION, PlanFile, native_key
from ..measure import native
from ..measure.tensors import conv_tf32_reader, cudnn_memory_format

__all__ = ["ops", "load_plans", "load_recorder", "clear_plans", "set_strict", "strict",
           "uncovered", "pin_counts", "reset_counts", "as_the_op_sees", "conv_keys",
           "build_ahead", "wait_ahead", "kept_plans", "plans_made", "loaded_keys",
           "call_shape"]


@functools.lru_cache(maxsize=None)
def ops():
    """``torch.ops.cudnn_explorer``, with the fake implementations registered (once)."""
    native.load()
    import torch

    def empty(shape, like, fmt):
        return torch.empty(shape, dtype=like.dtype, device=like.device, memory_format=fmt)

    @torch.library.register_fake("cudnn_explorer::conv")
    def _conv_fake(input, weight, bias, stride, padding, dilation, transposed,
                   output_padding, groups):
        shape = output_shape(input.shape, weight.shape, stride, padding, dilation, groups,
                             transposed, output_padding)
        return empty(shape, input, cudnn_memory_format(input, weight))

    @torch.library.register_fake("cudnn_explorer::conv_backward")
    def _conv_backward_fake(grad_output, input, weight, stride, padding, dilation,
                            transposed, output_padding, groups, output_mask):
        fmt = cudnn_memory_format(input, weight)
        gi = empty(input.shape, input, fmt) if output_mask[0] else None
        gw = empty(weight.shape, weight, fmt) if output_mask[1] else None
        gb = grad_output.new_empty((grad_output.shape[1],)) if output_mask[2] else None
        return gi, gw, gb

    return torch.ops.cudnn_explorer


# the keys of the plans loaded by load_plans, and whether strict pinning is on (for the
# strict checks of pinning/functional.py, without a native call)
_LOADED = [frozenset()]
STRICT = [False]


def _one_plan_each(plans: PlanFile) -> None:
    """UserError naming the first two entries the op would key alike (Note [plan keys]):
    for example two that differ only in ``deterministic``, which the key leaves out."""
    seen = {}
    for i, e in enumerate(plans.entries):
        k = tuple(native_key(e))
        if k in seen:
            j = seen[k]
            first = plans.entries[j]
            what = ("they differ only in 'deterministic'"
                    if first.key.deterministic != e.key.deterministic else "the same key")
            raise UserError(f"plan file '{plans.source or 'a PlanFile'}': entries {j} and {i} "
                            f"are two plans for {e.key.direction} of {e.problem.describe()} "
                            f"({what}; the op keeps one plan per problem-direction): "
                            f"keep one of them")
        seen[k] = i


def load_plans(plans: PlanFile, strict: bool = False) -> int:
    """Make ``plans`` the process's pinned plans (replacing any loaded before; every
    thread rebuilds its plans on its next call) and reset the counts; returns how many.
    Atomic: a file the op refuses (UserError) leaves the plans loaded before as they
    were. ``strict``: from now on a call that would fall back raises instead (Note
    [strict pinning] in csrc/pinned_plans.cpp)."""
    C = native.load()
    ops()
    _one_plan_each(plans)
    specs = []
    for e in plans.entries:
        spec = C.PlanSpec()
        spec.key = native_key(e)
        spec.engine = e.engine
        spec.knobs = [tuple(kv) for kv in parse_tag(e.tag).knobs]  # the tag's own order
        spec.tag = e.tag
        spec.description = f"{e.key.direction} of {e.problem.describe()}"
        specs.append(spec)
    native.call("loading the plans", C.load_plans, specs)
    set_strict(strict)
    _LOADED[0] = frozenset(tuple(s.key) for s in specs)
    return len(specs)


# Note [recording without plans]: with no plan file loaded the op counts every call
# under one unkeyed row ("no plan file is loaded", csrc/conv_op.cpp), before it computes
# a key. The recorder loads one plan whose key no call can have (direction -1) instead:
# every CUDA call is then keyed, found uncovered (no cuDNN work: build() returns at once)
# and counted under its own key, which is the record. pin_counts leaves the recorder's
# own row out: it has no calls.
RECORDER_KEY = [KEY_VERSION, -1, 0, 0, 1, 0, 4, 0, 0, 0, 0]


def load_recorder() -> None:
    """No plans, but every CUDA call counted under the key it would be pinned by (Note
    [recording without plans]); strict pinning off, counts reset."""
    C = native.load()
    ops()
    spec = C.PlanSpec()
    spec.key = RECORDER_KEY
    spec.engine = -1
    spec.knobs = []
    spec.tag = ""
    spec.description = "the recorder (no call has this key)"
    native.call("starting the recorder", C.load_plans, [spec])
    set_strict(False)
    _LOADED[0] = frozenset()


def clear_plans() -> None:
    """No pinned plans (and no strict pinning): every call of the op runs PyTorch's own
    convolution."""
    C = native.load()
    native.call("clearing the plans", C.load_plans, [])
    set_strict(False)
    _LOADED[0] = frozenset()


def loaded_keys() -> frozenset:
    """The keys (tuples) of the plans loaded now."""
    return _LOADED[0]


def set_strict(on: bool) -> None:
    """Strict pinning on or off for the plans loaded (Note [strict pinning])."""
    native.load().set_strict(bool(on))
    STRICT[0] = bool(on)


def strict() -> bool:
    """Whether strict pinning is on (calls that would fall back raise)."""
    return bool(native.load().strict())


def uncovered(input, weight, stride, padding, dilation, transposed: bool, output_padding,
              groups: int, directions) -> Optional[str]:
    """The first of ``directions`` ("output", "input gradient", "weight gradient": what
    the call computes) that the loaded plans do not cover, as "its KEY's words (key
    [...])", or None."""
    C = native.load()
    keys = conv_keys(input, weight, stride, padding, dilation, transposed, output_padding,
                     groups)
    # cuDNN's view (fwd, bwd-data, bwd-filter) of each: a transposed call's output is
    # the bwd-data of the convolution it is the adjoint of (Note [pinned convolution op])
    which = {"output": 1 if transposed else 0, "input gradient": 0 if transposed else 1,
             "weight gradient": 2}
    loaded = _LOADED[0]
    for d in directions:
        k = keys[which[d]]
        if tuple(k) not in loaded:
            return f"its {d}, {C.describe_plan_key(k)} (key {k}), has no plan in the file"
    return None


def pin_counts(reset: bool = False) -> PinCounts:
    """The op's record since the counts were last reset (``reset``: reset them after
    reading)."""
    reset = flag(reset, "reset")
    C = native.load()
    rows = [PinnedDirection(key=list(s.key), description=s.description, covered=s.covered,
                            tag=s.tag, ran=s.ran, pinned_calls=s.pinned_calls,
                            fallback_calls=s.fallback_calls, reason=s.reason,
                            builds=s.builds, build_ms=s.build_ms)
            for s in C.pin_stats() if s.pinned_calls or s.fallback_calls or s.builds]
    rows.sort(key=lambda d: (not d.covered, d.description))
    if reset:
        C.reset_pin_counts()
    return PinCounts(directions=rows)


def reset_counts() -> None:
    native.load().reset_pin_counts()


def build_ahead(device: int, threads: int, kept=()) -> None:
    """Start building every plan of the loaded file on ``threads`` threads of its own,
    for ``device`` (Note [plans built ahead] in csrc/pinned_plans.cpp), restoring those
    in ``kept`` ((key, tag, form) each, pinning/kept.py) instead where they pass the
    op's checks; returns at once."""
    native.call("building the plans ahead", native.load().build_ahead, int(device),
                int(threads), [(list(k), str(t), bytes(f)) for k, t, f in kept])


def wait_ahead() -> int:
    """Wait for the plans build_ahead started; how many it started."""
    return int(native.load().wait_ahead())


def kept_plans() -> list:
    """The plans built or restored ahead, as cuDNN serializes them: (key, tag, form,
    runtime_compiled) each."""
    return [(list(k), t, bytes(f), bool(rc)) for k, t, f, rc in native.load().kept_plans()]


def plans_made() -> List[PlanMade]:
    """How each plan of the loaded file was made in this process (built, restored, how
    long, how long first calls waited), for those made so far."""
    return sorted((PlanMade(description=s.description, tag=s.tag, builds=s.builds,
                            restored=s.restored, build_ms=s.build_ms, waited_ms=s.waited_ms,
                            kept_error=s.kept_error, runtime_compiled=s.runtime_compiled)
                   for s in native.load().pin_stats()
                   if s.covered and (s.builds or s.restored or s.kept_error)),
                  key=lambda m: m.description)


def call_shape(input, weight, stride, padding, dilation, transposed, output_padding,
               groups) -> tuple:
    """Everything a call's keys (conv_keys of as_the_op_sees) are computed from, as one
    hashable value, cheaply (no native call): the tensors' sizes, strides and dtypes,
    whether they are CUDA tensors, autocast's cast, the geometry and the TF32 setting.
    Calls with equal call shapes have equal keys."""
    import torch

    cuda = input.is_cuda
    cast = torch.get_autocast_dtype("cuda") if cuda and torch.is_autocast_enabled("cuda") \
        else None
    return (tuple(input.shape), input.stride(), input.dtype, tuple(weight.shape),
            weight.stride(), weight.dtype, cuda, cast, tuple(stride), tuple(padding),
            tuple(dilation), bool(transposed), tuple(output_padding), int(groups),
            conv_tf32_reader()())


def as_the_op_sees(input, weight, cuda: Optional[bool] = None):
    """(input, weight) as the op keys them: under CUDA autocast, a floating-point input
    that is not already autocast's dtype (nor float64) is cast, as ``aten::convolution``
    casts it; here as meta tensors of the same shape and strides, so nothing is copied.
    ``cuda``: whether the call's tensors are CUDA tensors (default: ``input``'s device)."""
    import torch

    cuda = input.is_cuda if cuda is None else cuda
    if cuda and input.is_floating_point() and torch.is_autocast_enabled("cuda"):
        to = torch.get_autocast_dtype("cuda")
        if input.dtype not in (to, torch.float64):
            return (torch.empty_like(input, dtype=to, device="meta"),
                    torch.empty_like(weight, dtype=to, device="meta"))
    return input, weight


def conv_keys(input, weight, stride, padding, dilation, transposed: bool = False,
              output_padding: Optional[List[int]] = None, groups: int = 1) -> List[List[int]]:
    """The op's keys (Note [plan keys]) for a call's cuDNN forward, backward-data and
    backward-filter, as it computes them from the tensors (their dims, dtype and layout;
    the current TF32 setting)."""
    return native.call("computing the keys of a call", native.load().conv_keys, input, weight,
                       list(stride), list(padding), list(dilation), bool(transposed),
                       list(output_padding or [0]), int(groups))
