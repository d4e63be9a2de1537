"""The layer names a recording gives each convolution it records, where known.

Note [layer names without the model]: the recorded program builds its models however it
likes, and never hands one to us. torch calls a global hook whenever a module gets a
submodule or a parameter (``__setattr__``, ``add_module``, ``register_parameter``), so
from the moment the start-up hook switches recording on, every module built knows its
parent and the name it has there, and every parameter its owner: a convolution's weight
names its layer as ``named_modules`` would ("encoder.0.conv1"), walked up to the module
that has no parent. Nothing holds a module or a parameter alive (weak references). A
weight that was never registered (a bare ``F.conv2d`` weight, a model unpickled whole,
which sets attributes without the hooks) names no layer. A call that torch.compile
traces is named while it is traced (Note [names of traced calls]).

Each named call's keys are the op's (Note [plan keys]), computed once per layer and call
shape: the weight's layer and the call's geometry (autocast's dtype included, since the
op casts as ``aten::convolution`` does) are the cache's key, so a step repeats no work
but a dictionary lookup. Note [observer's cost]: every eager convolution call of a
recording pays it, so tensors are mapped by a plain dictionary by ``id`` (_ByTensor: each
entry holding a weak reference that removes it when its tensor dies), not a
WeakIdKeyDictionary, whose lookup builds a reference object per call; and the call's shape
is op.call_shape, which reads cuDNN's TF32 setting from torch._C, not through
torch.backends' properties. On this project's CPU machine a seen call's observation
takes 1.9 us (4.2 us through a WeakIdKeyDictionary).
"""
from __future__ import annotations

import weakref
from typing import Dict, List, Optional, Set, Tuple

from . import op

__all__ = ["LayerNames"]


# Modules that wrap a model (or a part) and add a prefix to its names (torch.compile's
# OptimizedModule: "_orig_mod."; DistributedDataParallel and DataParallel: "module.";
# FSDP: "_fsdp_wrapped_module."; activation checkpointing: "_checkpoint_wrapped_module."):
# what they wrap keeps its own names, as the wrapped model's named_modules gives them
WRAPPERS = {("OptimizedModule", "_orig_mod"), ("DistributedDataParallel", "module"),
            ("DataParallel", "module"), ("FullyShardedDataParallel", "_fsdp_wrapped_module"),
            ("CheckpointWrapper", "_checkpoint_wrapped_module")}


class _ByTensor(dict):
    """Values by live tensor, by identity (a tensor's ``==`` is elementwise): ``id`` to
    (a weak reference to the tensor, the value); an entry goes when its tensor does
    (Note [observer's cost])."""

    def value(self, tensor, default=None):
        hit = dict.get(self, id(tensor))
        return hit[1] if hit is not None and hit[0]() is tensor else default

    def put(self, tensor, value) -> None:
        key = id(tensor)

        def gone(ref, d=self):  # the entry still its own: an id is reused only after
            if dict.get(d, key, (None,))[0] is ref:
                del d[key]
        self[key] = (weakref.ref(tensor, gone), value)


class LayerNames:
    """Parents and parameter owners, from the moment ``install()`` is called, and per key
    the layers whose calls had it (``observe``, then ``by_key``)."""

    def __init__(self):
        self._parent: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
        self._owner = _ByTensor()  # parameter: a weak reference to its module
        self._seen = _ByTensor()  # weight: the call shapes whose keys are noted
        self._names: Dict[Tuple[int, ...], Set[str]] = {}
        self._traced: Dict[tuple, Set[str]] = {}  # by key, None where sizes set it
        self._handles: list = []

    def install(self) -> None:
        """Hear every module and parameter registered from now on."""
        from torch.nn.modules import module as m

        def on_module(parent, name, child):
            if child is None or child in self._parent:
                return
            if (type(parent).__name__, name) in WRAPPERS:
                name = ""  # the wrapped module takes the wrapper's place and name
            self._parent[child] = (weakref.ref(parent), name)

        def on_parameter(owner, name, param):
            if param is not None and self._owner.value(param) is None:
                self._owner.put(param, weakref.ref(owner))

        self._handles = [m.register_module_module_registration_hook(on_module),
                         m.register_module_parameter_registration_hook(on_parameter)]

    def remove(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []

    def name_of(self, weight) -> Optional[str]:
        """The qualified name of the module that owns ``weight``, or None."""
        ref = self._owner.value(weight)
        owner = module = ref() if ref is not None else None
        if module is None:
            return None
        parts: List[str] = []
        seen = set()
        while module is not None and id(module) not in seen:
            seen.add(id(module))
            up = self._parent.get(module)
            if up is None:
                break
            if up[1]:
                parts.append(up[1])
            module = up[0]()
        return ".".join(reversed(parts)) or type(owner).__name__

    def observe(self, input, weight, stride, padding, dilation, transposed, output_padding,
                groups) -> None:
        """Note the call's keys under its layer's name (a weight that names none: nothing).
        Never raises: a name is only where known, and the call goes on either way (the op
        says what is wrong with a call)."""
        try:
            self._observe(input, weight, stride, padding, dilation, transposed,
                          output_padding, groups)
        except Exception:  # noqa: BLE001
            pass

    def _observe(self, input, weight, stride, padding, dilation, transposed, output_padding,
                 groups) -> None:
        shape = op.call_shape(input, weight, stride, padding, dilation, transposed,
                              output_padding, groups)
        seen = self._seen.value(weight)
        if seen is None:
            seen = set()
            self._seen.put(weight, seen)
        elif shape in seen:
            return
        seen.add(shape)
        name = self.name_of(weight)
        if name is None:
            return
        input, weight = op.as_the_op_sees(input, weight)
        keys = op.conv_keys(input, weight, stride, padding, dilation, transposed,
                            output_padding, groups)
        for k in keys:
            self._names.setdefault(tuple(k), set()).add(name)

    def observe_traced(self, input, weight, stride, padding, dilation, transposed,
                       output_padding, groups) -> None:
        """As ``observe``, for a call torch.compile traces (Note [names of traced calls]):
        ``input`` and ``weight`` each as (the fake tensor dynamo traces with, the graph
        node that made it). Never raises."""
        try:
            (x, _), (w, w_node) = input, weight
            name = self.name_of(_parameter_of(w, w_node))
            if name is None:
                return

            def keys_at(scale):  # the keys with every symbolic size times scale
                seen = op.as_the_op_sees(_sized(x, scale), _sized(w, scale), cuda=x.is_cuda)
                return op.conv_keys(*seen, stride, padding, dilation, transposed,
                                    output_padding, groups)
            for at_hint, doubled in zip(keys_at(1), keys_at(2)):
                if at_hint == doubled:  # no symbolic size: the call's own key
                    self._names.setdefault(tuple(at_hint), set()).add(name)
                elif len(at_hint) == len(doubled):  # what a symbolic size sets: any value
                    pattern = tuple(a if a == b else None for a, b in zip(at_hint, doubled))
                    self._traced.setdefault(pattern, set()).add(name)
        except Exception:  # noqa: BLE001
            pass

    def by_key(self, keys=()) -> Dict[Tuple[int, ...], List[str]]:
        """Per key, the names of the layers whose calls had it, sorted: the keys of the
        calls observed (eagerly, or traced at sizes that were not symbolic), and of
        ``keys`` (those the op counted) those that a traced call's key with symbolic sizes
        matches (Note [names of traced calls])."""
        names = {k: set(v) for k, v in self._names.items()}
        for k in keys if self._traced else ():
            k = tuple(k)
            for pattern, traced in self._traced.items():
                if len(pattern) == len(k) and \
                        all(p is None or p == v for p, v in zip(pattern, k)):
                    names.setdefault(k, set()).update(traced)
        return {k: sorted(v) for k, v in names.items()}


# Note [names of traced calls]: a compiled graph's convolutions pass no Python when they
# run, so a recording names them while torch.compile traces them: the route, traced by
# dynamo, has it call LayerNames.observe_traced at trace time (torch._dynamo.comptime,
# pinning/functional.py) with the fake tensors dynamo traces with. A parameter's fake is
# found back as the parameter: its graph input's own record of the tensor it stands for
# (``grapharg``), or dynamo's FakeTensorConverter (real tensor to an id, id to its fake).
# A weight made in the traced code (``w.half()``) names no layer, as in an eager call. A
# call traced at fixed sizes gets its own keys, as an eager call does. A graph with
# symbolic (dynamic) sizes runs every size it admits without tracing again: its keys are
# computed twice, at the sizes being traced and at those sizes doubled, and the positions
# that differ are what those sizes set, so the layer names every recorded key that equals
# its own elsewhere (core plan key order, Note [plan keys]). Dynamo's internals are
# private: where a torch keeps them elsewhere, traced calls name no layer, as
# unregistered weights name none.


def _parameter_of(fake, node):
    """The real tensor whose fake ``fake`` (the graph input ``node``) stands for, or
    None."""
    arg = getattr(node, "meta", {}).get("grapharg") if node is not None else None
    example = getattr(arg, "example", None)
    if example is not None:
        return example
    return _memo_real(fake)


def _memo_real(fake):
    """The real tensor dynamo's FakeTensorConverter made ``fake`` from, or None (a scan of
    every tensor it faked: the fallback where the graph input keeps no record)."""
    mode = getattr(fake, "fake_mode", None)
    if mode is None:
        return None
    converter = mode.fake_tensor_converter
    memo = converter.tensor_memo
    for real, tid in list(converter.meta_converter.describer.lookup_tensor.items()):
        if memo.get(tid) is fake:
            return real
    return None


def _sized(fake, scale: int):
    """A meta tensor of ``fake``'s dtype, sizes and memory order: fixed sizes as they
    are, symbolic ones at the value being traced (its hint: nothing is guarded on; 64
    where there is none) times ``scale``."""
    import torch

    sizes = [v if isinstance(v, int) else _hint(v, 64) * scale for v in fake.shape]
    order = sorted(range(len(sizes)), key=lambda d: _hint(fake.stride()[d], 0),
                   reverse=True)  # outermost first, as the fake's strides lay it out
    strides = [0] * len(sizes)
    step = 1
    for d in reversed(order):
        strides[d] = step
        step *= max(sizes[d], 1)
    return torch.empty_strided(sizes, strides, dtype=fake.dtype, device="meta")


def _hint(v, missing: int) -> int:
    """An int, or a SymInt's value where it was made (``missing`` where it has none)."""
    if isinstance(v, int):
        return v
    hint = v.node.hint
    return int(hint) if hint is not None else missing
