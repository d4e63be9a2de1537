"""Convolutions shaped like ``torch.nn.functional.conv{1,2,3}d`` and
``conv_transpose{1,2,3}d`` that run through the pinned op, and :func:`pinned_functions`,
the context in which those ``torch.nn.functional`` calls (and so every ``nn.Conv*`` layer)
run through it.

They take what the functional ones take (unbatched inputs, ``padding="same"`` and
``"valid"``) and compute what they compute: ``"same"`` padding with an odd total is
padded on the right first, as ATen's ``_convolution_mode`` does.
"""
from __future__ import annotations

import contextlib
import threading
import warnings
from typing import Sequence

from ..core.errors import MissingDependencyError
from . import op

__all__ = ["conv", "conv_transpose", "pinned_functions", "process_routing", "routed",
           "StrictPinError"]

ZEROS = {1: (0,), 2: (0, 0), 3: (0, 0, 0)}


class StrictPinError(RuntimeError):
    """Strict pinning (``pin(..., strict=True)``): a convolution call that the plans do
    not pin, named by its layer (where known), direction and key."""


def _entries():
    """(torch, the op's overload, its eager entry, the plain tensor types, why the op is
    missing). Resolved once, at import: torch.compile then sees a plain torch.ops call in
    the functions below. Note [no native module]: where the extension cannot be loaded
    (a pinned model unpickled on a machine without it), the op and its entry are None and
    every call runs PyTorch's own convolution, with one warning."""
    import torch

    plain = (torch.Tensor, torch.nn.Parameter)
    try:
        ops = op.ops()
    except MissingDependencyError as e:
        return torch, None, None, plain, str(e)
    return torch, ops.conv.default, op.native.load().conv, plain, ""


_torch, CONV, _EAGER, _PLAIN, _MISSING = _entries()
_WARNED = []
# A recording's observer of each eager call's arguments (pinning/layer_names.py), or None;
# and, where OBSERVER is set, its observer of each call torch.compile traces (Note [names
# of traced calls] in pinning/layer_names.py), or None
OBSERVER: list = [None]
TRACE_OBSERVER: list = [None]


def _observe_traced(ctx) -> None:
    """Run by dynamo while it traces ``call`` (torch._dynamo.comptime: ``ctx`` has the
    call's locals as dynamo holds them): the call's tensors, as the fake tensors dynamo
    traces with and the graph nodes that made them, to TRACE_OBSERVER. Never raises: the
    trace goes on either way."""
    try:
        if TRACE_OBSERVER[0] is None:
            return
        get = ctx.get_local
        tensors = [(get(n).as_fake(), get(n).as_proxy().node) for n in ("input", "weight")]
        geometry = [get(n).as_python_constant() for n in
                    ("stride", "padding", "dilation", "transposed", "output_padding", "groups")]
        TRACE_OBSERVER[0](*tensors, *geometry)
    except Exception:  # noqa: BLE001
        pass


def _unpinned(input, weight, bias, stride, padding, dilation, transposed, output_padding,
              groups):
    if not _WARNED:
        _WARNED.append(True)
        warnings.warn(f"cudnn_explorer: pinned convolutions run PyTorch's own convolution "
                      f"here: {_MISSING}", RuntimeWarning, stacklevel=3)
    return _torch.convolution(input, weight, bias, stride, padding, dilation, transposed,
                              output_padding, groups)


# Note [strict checks, once per call shape]: strict pinning checks every call's
# directions against the loaded plans before the call runs (a backward direction the file
# lacks would otherwise fail only in the backward). The keys cost a native call and some
# Python per call (about 4 us on this project's CPU machine), so a call shape found
# covered is remembered, for the plans loaded then: everything the keys are computed from
# (the tensors' sizes, strides and dtypes, autocast's cast, the geometry, the TF32
# setting) and the directions wanted. Uncovered shapes are not remembered: they raise.
_COVERED: dict = {"plans": None, "shapes": set()}


def _check_strict(input, weight, stride, padding, dilation, transposed, output_padding,
                  groups):
    """StrictPinError when the call needs a direction the loaded plans do not cover."""
    grad = _torch.is_grad_enabled()
    wants_input, wants_weight = grad and input.requires_grad, grad and weight.requires_grad
    shape = (op.call_shape(input, weight, stride, padding, dilation, transposed,
                           output_padding, groups), wants_input, wants_weight)
    loaded = op.loaded_keys()
    if _COVERED["plans"] is not loaded:  # other plans: what was covered may not be
        _COVERED["shapes"] = set()
        _COVERED["plans"] = loaded
    shapes = _COVERED["shapes"]  # (plans loaded meanwhile: a set that is then dropped)
    if shape in shapes:
        return
    wanted = ["output"] + (["input gradient"] if wants_input else []) + \
        (["weight gradient"] if wants_weight else [])
    input, weight = op.as_the_op_sees(input, weight)
    why = op.uncovered(input, weight, stride, padding, dilation, transposed, output_padding,
                       groups, wanted)
    if why:
        raise StrictPinError(f"cudnn_explorer strict pinning: a convolution call: {why}")
    shapes.add(shape)


def call(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    """The op on ``aten::convolution``'s arguments. Note [eager entry]: calling a torch.ops
    overload from Python builds a boxed argument stack from its schema, about 5 us of
    host time per call (aten's own convolution through torch.ops: 8.0 us against
    F.conv2d's 3.2 us on this project's CPU machine); eager calls on plain tensors take
    the extension's direct entry to the same dispatcher op instead (its autograd,
    autocast and dispatch modes alike). torch.compile, tensor subclasses and an active
    TorchFunctionMode get the torch.ops overload."""
    if CONV is None:
        return _unpinned(input, weight, bias, stride, padding, dilation, transposed,
                         output_padding, groups)
    compiling = _torch.compiler.is_compiling()
    if op.STRICT[0] and not compiling:
        _check_strict(input, weight, stride, padding, dilation, transposed, output_padding,
                      groups)
    if OBSERVER[0] is not None:
        if compiling:  # torch._dynamo is imported: it is tracing
            from torch._dynamo.comptime import comptime

            comptime(_observe_traced)
        else:
            OBSERVER[0](input, weight, stride, padding, dilation, transposed, output_padding,
                        groups)
    if not compiling and type(input) in _PLAIN and \
            type(weight) in _PLAIN and (bias is None or type(bias) in _PLAIN) and \
            not _torch._C._is_torch_function_mode_enabled():
        return _EAGER(input, weight, bias, stride, padding, dilation, transposed,
                      output_padding, groups)
    return CONV(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups)


def _tuple(v, n: int, what: str) -> Sequence[int]:
    if type(v) is tuple and len(v) == n:  # an nn.Conv*'s own: as it is (every call)
        for x in v:
            if type(x) is not int:
                break
        else:
            return v
    if isinstance(v, int):
        return [v] * n
    v = [int(x) for x in v]
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{what}: {len(v)} values for a {n}-D convolution")
    return v


def _batched(input, n: int):
    if input.dim() == n + 2:
        return input, True
    if input.dim() == n + 1:
        return input.unsqueeze(0), False
    raise RuntimeError(f"expected a {n + 1}-D (unbatched) or {n + 2}-D (batched) input to a "
                       f"{n}-D convolution, but got an input of size {list(input.shape)}")


def conv(input, weight, bias=None, stride=1, padding=0, dilation=1, groups: int = 1):
    """``torch.nn.functional.conv{n}d`` (n from the weight) through the pinned op."""
    n = weight.dim() - 2
    x, batched = _batched(input, n)
    s, d = _tuple(stride, n, "stride"), _tuple(dilation, n, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            p = [0] * n
        elif padding == "same":
            if any(v != 1 for v in s):
                raise ValueError("padding='same' is not supported for strided convolutions")
            total = [d[i] * (weight.shape[2 + i] - 1) for i in range(n)]
            p = [t // 2 for t in total]
            extra = []
            for i in reversed(range(n)):  # F.pad lists the last dim first
                extra += [0, total[i] - 2 * p[i]]
            if any(extra):
                x = _torch.nn.functional.pad(x, extra)
        else:
            raise ValueError(f"invalid padding string {padding!r}, should be one of "
                             f"{{'valid', 'same'}}")
    else:
        p = _tuple(padding, n, "padding")
    out = call(x, weight, bias, s, p, d, False, ZEROS[n], int(groups))
    return out if batched else out.squeeze(0)


def conv_transpose(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                   groups: int = 1, dilation=1):
    """``torch.nn.functional.conv_transpose{n}d`` (n from the weight) through the pinned
    op."""
    n = weight.dim() - 2
    x, batched = _batched(input, n)
    out = call(x, weight, bias, _tuple(stride, n, "stride"), _tuple(padding, n, "padding"),
                     _tuple(dilation, n, "dilation"), True,
                     _tuple(output_padding, n, "output_padding"), int(groups))
    return out if batched else out.squeeze(0)


# Note [routing by the functions' names]: two ways to route the functional convolutions
# through the op. process_routing(), the zero-code hook's, for the whole process from the
# moment the program has imported torch: it puts its route functions in the place of
# ``torch.nn.functional.conv*d`` / ``conv_transpose*d``, looked up by name at each call
# (as nn.Conv*'s forward and torch.compile's tracing do), so it reaches every thread
# (a DataParallel replica, a serving pool) and costs nothing elsewhere. pinned_functions(),
# pinned()'s, for a ``with`` block: a TorchFunctionMode, which sees every torch function
# call (2.9 us each on this project's CPU machine, some 190 a training step of a small
# model) but in the entering thread only, and under every name (``torch.conv2d``, a
# reference taken before), and leaves nothing behind when the block ends (a reference
# taken inside it is PyTorch's own). process_routing() leaves ``torch``'s own names as
# they are, since torch.compile knows its in-graph functions by what those names hold
# when it first compiles: a direct ``torch.conv2d`` call runs unpinned there, as does a
# reference taken before it began (only torch's own modules could hold one, and none does).
_NAMES = ("conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d",
          "conv_transpose3d")
_ROUTING = {"depth": 0, "saved": []}  # open contexts; (name, what it held) replaced
_ROUTING_LOCK = threading.Lock()


# Note [what a route leaves to PyTorch]: a call whose arguments are not tensors of
# PyTorch's own kinds takes the function it replaced, as it would unrouted: an FX Proxy
# (symbolic_trace records the call by name; the route's Python would branch on it); a
# tensor subclass with a __torch_function__ of its own (a library's wrapper), whose own
# handling of the convolution is what it expects (but ExpandedWeight: _per_sample); or one
# with a __torch_dispatch__ of its own (DTensor, whose sharding rules do not know the op),
# but torch's own tracing tensors (FakeTensor and FunctionalTensor, which torch.compile
# traces with). Parameter and the other kinds that disable __torch_function__ go through
# the op.
_OWN_KINDS = {_torch.Tensor.__torch_function__.__func__,
              _torch._C._disabled_torch_function_impl}


def _impl(kind, name: str):
    f = getattr(kind, name, None)
    return getattr(f, "__func__", f)


def _foreign(*values) -> bool:
    """Whether any of ``values`` (None aside) is no tensor of PyTorch's own kinds."""
    for v in values:
        if v is None or type(v) in _PLAIN:
            continue
        kind = type(v)
        if not isinstance(v, _torch.Tensor) or _impl(kind, "__torch_function__") not in _OWN_KINDS:
            return True
        if _impl(kind, "__torch_dispatch__") is not _impl(_torch.Tensor, "__torch_dispatch__") \
                and not kind.__module__.startswith("torch._subclasses."):
            return True
    return False


# PyTorch's own functions, as this module found them (it is what replaces them)
_ORIGINALS = {name: getattr(_torch.nn.functional, name) for name in _NAMES}


def _route_for(name: str):
    """The route that takes ``torch.nn.functional.<name>``'s place: its signature, through
    the op (Note [what a route leaves to PyTorch])."""
    original = _ORIGINALS[name]
    if "transpose" in name:
        def route(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                  dilation=1):
            if _foreign(input, weight, bias):
                return original(input, weight, bias, stride, padding, output_padding, groups,
                                dilation)
            return conv_transpose(input, weight, bias, stride, padding, output_padding,
                                  groups, dilation)
    else:
        def route(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
            if _foreign(input, weight, bias):
                args = (input, weight, bias, stride, padding, dilation, groups)
                if type(weight).__name__ == "ExpandedWeight" and \
                        getattr(_torch.nn.functional, name) is route:
                    return _per_sample(route, original, args)
                return original(*args)
            return conv(input, weight, bias, stride, padding, dilation, groups)
    route.__name__ = route.__qualname__ = name
    # pickled by reference as torch.nn.functional's function, which it is while routed
    # (a process that unpickles it gets that name's function there)
    route.__module__ = "torch.nn.functional"
    route.__doc__ = (f"torch.nn.functional.{name} through cudnn_explorer's pinned op.\n\n"
                     + (original.__doc__ or ""))
    return route


def _per_sample(route, original, args):
    """Note [per-sample gradients under routing]: ExpandedWeight (torch's per-sample
    gradients, ``call_for_per_sample_grads``) handles ``F.conv{n}d`` by its own rule,
    which picks the dimensionality by comparing the function it was called for with
    ``F.conv1d``/``F.conv2d``/``F.conv3d`` as they are at call time: the routes, while
    routed. While routed by name, the call is handed to it as a call of the route (the
    route known to it as PyTorch's function is), so the check holds; its rule calls the
    route on the plain weight, through the op, and computes the per-sample gradients its
    own way; its backward compares with ``F.conv{n}d`` again, so the names must still be
    routed then, as the process-wide routing of the start-up hook keeps them. Inside
    ``pinned_functions`` (names not routed) it gets PyTorch's function, which its rule
    calls unpinned."""
    from torch.nn.utils._expanded_weights.expanded_weights_impl import HANDLED_FUNCTIONS

    if route not in HANDLED_FUNCTIONS and original in HANDLED_FUNCTIONS:
        HANDLED_FUNCTIONS[route] = HANDLED_FUNCTIONS[original]
    tensors = tuple(a for a in args[:3] if a is not None)
    return _torch.overrides.handle_torch_function(route, tensors, *args)


# One function per name, made once and never freed: TorchScript knows each by its id as
# its aten op (Note [routing and TorchScript])
_ROUTES = {name: _route_for(name) for name in _NAMES}


def _script_knows_routes() -> None:
    """Note [routing and TorchScript]: torch.jit.script resolves ``F.conv2d`` through a
    table of builtins by object id; a Python function in its place would be compiled as
    TorchScript and fail. Each route is entered as its aten op, so scripted code calls
    ATen's convolution (unpinned, as it did under the TorchFunctionMode before)."""
    try:
        from torch.jit._builtins import _register_builtin
    except ImportError:  # a torch without the table: scripting a routed call fails there
        return
    for name, route in _ROUTES.items():
        _register_builtin(route, f"aten::{name}")


def _route_on() -> None:
    import torch.nn.functional as F

    _script_knows_routes()
    for name in _NAMES:
        _ROUTING["saved"].append((name, getattr(F, name)))
        setattr(F, name, _ROUTES[name])


def _route_off() -> None:
    import torch.nn.functional as F

    for name, held in _ROUTING["saved"]:
        if getattr(F, name) is _ROUTES[name]:  # not replaced since by another patcher
            setattr(F, name, held)
    _ROUTING["saved"] = []


def routed() -> bool:
    """Whether process_routing() routes the functional convolutions now."""
    return _ROUTING["depth"] > 0


@contextlib.contextmanager
def process_routing():
    """Inside it, ``torch.nn.functional.conv*d`` and ``conv_transpose*d`` calls (those of
    ``nn.Conv*`` layers included), in every thread, run through the pinned op (Note
    [routing by the functions' names]). Contexts nest; the functions are PyTorch's own
    again when the last one closes."""
    with _ROUTING_LOCK:
        if _ROUTING["depth"] == 0:
            _route_on()
        _ROUTING["depth"] += 1
    try:
        yield
    finally:
        with _ROUTING_LOCK:
            _ROUTING["depth"] -= 1
            if _ROUTING["depth"] == 0:
                _route_off()


@contextlib.contextmanager
def pinned_functions():
    """Inside it, in this thread, ``torch.nn.functional.conv*d`` and ``conv_transpose*d``
    calls (those of ``nn.Conv*`` layers included, under any name) run through the pinned
    op: a TorchFunctionMode (Note [routing by the functions' names])."""
    from torch.overrides import TorchFunctionMode

    routes = {_ORIGINALS[name]: _ROUTES[name] for name in _NAMES}

    class _Pinned(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            route = routes.get(func)
            return (route or func)(*args, **(kwargs or {}))

    with _Pinned():
        yield
