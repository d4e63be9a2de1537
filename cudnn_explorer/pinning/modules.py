"""Pinning a model: every ``nn.Conv{1,2,3}d`` and ``nn.ConvTranspose{1,2,3}d`` layer runs
through the pinned op, with the plans of one plan file.

A pinned layer keeps its parameters, state dict and ``isinstance`` answers: only its class
changes, to a subclass whose convolution is the op's (:func:`unpin` gives the class back).
A layer whose class replaces the convolution itself (its own ``forward`` or
``_conv_forward``) is left alone and listed as skipped; ``pinned`` routes the functional
calls of such code too.
"""
from __future__ import annotations

import contextlib
import os
import weakref
from typing import Dict, List, Optional, Tuple, Union

from ..core.errors import ExplorerError, UserError
from ..core.options import flag
from ..core.pin_report import PinReport
from ..core.plans import PlanFile
from . import functional, op
from .ahead import kept_file_of, start as start_ahead, threads_of

__all__ = ["pin", "unpin", "pinned", "plan_file"]

_PINNED_CLASSES: Dict[type, type] = {}


def plan_file(plans: Union[str, PlanFile]) -> PlanFile:
    """A PlanFile, or the one at path ``plans`` (UserError naming the file and the bad field)."""
    if isinstance(plans, PlanFile):
        return plans
    if not isinstance(plans, str):
        raise UserError(f"plans: {type(plans).__name__}: give a plan file's path or a PlanFile")
    from ..core.files import read_bytes

    data = read_bytes(plans, "plan file")
    try:
        return PlanFile.read(data, "plan file")
    except UserError as e:
        raise UserError(f"plan file '{plans}': {e}") from None


NOT_CHECKED = "not checked: no CUDA GPU here (every convolution runs PyTorch's own call)"


def _here():
    """This process's environment, or None where there is no CUDA GPU to compare with."""
    import torch

    if not torch.cuda.is_available():
        return None
    from ..measure.environment import environment

    return environment(torch.cuda.current_device())


def _differences(plans: PlanFile) -> List[str]:
    """What differs between the file's environment and this process's, in words."""
    here = _here()
    if here is None:
        return [NOT_CHECKED]
    return plans.differences(here)


def _ranks(group) -> Optional[Tuple[int, int, int]]:
    """(rank in ``group``, the group's size, the global rank of its rank 0) when the
    caller passed a process group, else None: pinning is collective only when asked to
    be (``if rank == 0: pin(eval_model, f)`` must not wait for the other ranks)."""
    if group is None or group is False:
        return None
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise UserError("group: torch.distributed is not initialised; pin with a process "
                        "group only after init_process_group (or give no group)")
    return dist.get_rank(group), dist.get_world_size(group), dist.get_global_rank(group, 0)


def _shared(plans, ranks, group) -> PlanFile:
    """Under torch.distributed: rank 0 reads the file and every rank receives its
    contents (the others need no copy of it); an error reading it is every rank's."""
    import torch.distributed as dist

    rank, _, first = ranks
    box = [None]
    if rank == 0:
        try:
            box = [("plans", plan_file(plans).to_json())]
        except ExplorerError as e:
            box = [("error", str(e))]
    dist.broadcast_object_list(box, src=first, group=group)
    kind, text = box[0]
    if kind == "error":
        raise UserError(f"rank 0: {text}")
    return PlanFile.read(text, "plan file (from rank 0)")


def _load(plans, allow_environment: bool, group=None, strict: bool = False):
    """(source, plans loaded, environment differences). Every rank checks its own
    environment against the file's; a difference on any rank is refused on every rank,
    naming the rank and what differs, unless ``allow_environment``."""
    ranks = _ranks(group)
    p = plan_file(plans) if ranks is None else _shared(plans, ranks, group)
    mine = _differences(p)
    if ranks is None:
        every = [mine]
    else:
        import torch.distributed as dist

        every = [None] * ranks[1]
        dist.all_gather_object(every, mine, group=group)

    def who(r: int) -> str:
        return f"rank {r}: " if ranks is not None else ""

    bad = [f"{who(r)}{'; '.join(d for d in ds if d != NOT_CHECKED)}"
           for r, ds in enumerate(every) if any(d != NOT_CHECKED for d in ds)]
    if bad and not allow_environment:
        where = f" on {len(bad)} of {len(every)} ranks" if ranks is not None else ""
        raise UserError(f"plan file from another environment{where}: {' | '.join(bad)} "
                        f"(allow_environment=True uses it anyway)")
    diffs = [f"{who(r)}{d}" for r, ds in enumerate(every) for d in ds]
    n = op.load_plans(p, strict=strict)
    source = plans if isinstance(plans, str) else (p.source or "a PlanFile")
    return source, n, diffs


def _build_ahead(model, threads: int, kept_file: Optional[str]) -> None:
    """Start building the loaded plans for the GPU of ``model``'s parameters (the
    current GPU for none, or for ``model`` None), where there is one and the extension
    has cudnn-frontend (Note [plans built ahead])."""
    import torch

    from ..measure import native

    if threads <= 0 or not torch.cuda.is_available() or \
            not native.build_info().get("cudnn_frontend"):
        return
    devices = {t.device.index for t in (model.parameters() if model is not None else ())
               if t.device.type == "cuda"}
    device = devices.pop() if len(devices) == 1 else torch.cuda.current_device()
    start_ahead(device, threads, kept_file)


# a pinned layer's qualified name in the model that pin() was given (for strict pinning's
# errors); weak, so that pinning keeps no layer alive
_NAMES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


class _Pinned:
    def _get_name(self):  # the layer's repr: "PinnedConv2d(3, 8, ...)"
        return "Pinned" + type(self)._cudnn_explorer_base.__name__


def _named(layer, fn):
    """fn(), with a strict pinning error (Note [strict pinning]) naming ``layer``."""
    try:
        return fn()
    except RuntimeError as e:
        text = str(e)
        if "cudnn_explorer strict pinning" not in text:
            raise
        name = _NAMES.get(layer, "")
        where = f"layer '{name}' ({type(layer)._get_name(layer)})" if name else \
            f"a {type(layer)._get_name(layer)} layer"
        text = text.splitlines()[0].split("cudnn_explorer strict pinning: ", 1)[-1]
        raise functional.StrictPinError(
            f"cudnn_explorer strict pinning: {where}: {text.replace('a convolution call: ', '')}"
        ) from None


class _PinnedConv(_Pinned):
    """Mixin placed before an nn.Conv*d class: its convolution is the pinned op's."""

    def _conv_forward(self, input, weight, bias):
        n = len(self.kernel_size)
        if self.padding_mode == "zeros" and not isinstance(self.padding, str) and \
                input.dim() == n + 2 and not op.STRICT[0]:  # the common case, to the op
            return functional.call(input, weight, bias, self.stride, self.padding,
                                   self.dilation, False, functional.ZEROS[n], self.groups)
        return _named(self, lambda: self._pinned_conv(input, weight, bias))

    def _pinned_conv(self, input, weight, bias):
        n = len(self.kernel_size)
        if self.padding_mode == "zeros" and not isinstance(self.padding, str) and \
                input.dim() == n + 2:
            return functional.call(input, weight, bias, self.stride, self.padding,
                                   self.dilation, False, functional.ZEROS[n], self.groups)
        if self.padding_mode != "zeros":
            import torch.nn.functional as F

            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            return functional.conv(input, weight, bias, self.stride, 0, self.dilation,
                                   self.groups)
        return functional.conv(input, weight, bias, self.stride, self.padding, self.dilation,
                               self.groups)


class _PinnedConvTranspose(_Pinned):
    """Mixin placed before an nn.ConvTranspose*d class."""

    def forward(self, input, output_size=None):
        if op.STRICT[0]:
            return _named(self, lambda: self._pinned_forward(input, output_size))
        return self._pinned_forward(input, output_size)

    def _pinned_forward(self, input, output_size=None):
        if self.padding_mode != "zeros":
            raise ValueError(f"Only `zeros` padding mode is supported for "
                             f"{type(self).__mro__[2].__name__}")
        n = len(self.kernel_size)
        output_padding = self._output_padding(input, output_size, self.stride, self.padding,
                                              self.kernel_size, n, self.dilation)
        return functional.conv_transpose(input, self.weight, self.bias, self.stride,
                                         self.padding, output_padding, self.groups,
                                         self.dilation)


def _kind(cls: type) -> Optional[tuple]:
    """(mixin, the torch.nn base class) for a layer class that can be pinned, or None."""
    import torch.nn as nn

    for base in (nn.Conv1d, nn.Conv2d, nn.Conv3d):
        if issubclass(cls, base):
            return _PinnedConv, base
    for base in (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d):
        if issubclass(cls, base):
            return _PinnedConvTranspose, base
    return None


def _why_not(module, base) -> str:
    import torch.nn as nn

    cls = type(module)
    if isinstance(module, nn.modules.lazy.LazyModuleMixin):
        return "a lazy layer not run yet (run the model once, then pin it)"
    if issubclass(base, nn.modules.conv._ConvNd) and not issubclass(
            base, nn.modules.conv._ConvTransposeNd):
        if cls._conv_forward is not base._conv_forward or cls.forward is not base.forward:
            return f"its class {cls.__name__} has a convolution of its own (use pinned())"
    elif cls.forward is not base.forward:
        return f"its class {cls.__name__} has a forward of its own (use pinned())"
    return ""


# Note [pinned classes by name]: a pinned layer's class is made when it is pinned, and
# pickle (torch.save(model), multiprocessing) finds a class by module and name. Each is
# named after its base's module and qualified name, in this module, and the module's
# __getattr__ makes it again from that name in a process that has not pinned one yet (its
# calls then run PyTorch's own convolution until plans are loaded there).
_SEP = "__"


def _name_of(cls: type) -> str:
    return "Pinned" + _SEP + cls.__module__.replace(".", "_dot_") + _SEP + \
        cls.__qualname__.replace(".", "_dot_")


def _pinned_class(cls: type, mixin: type) -> type:
    if cls not in _PINNED_CLASSES:
        name = _name_of(cls)
        made = type(name, (mixin, cls), {"__module__": __name__, "__qualname__": name,
                                         "_cudnn_explorer_base": cls})
        _PINNED_CLASSES[cls] = made
        globals()[name] = made
    return _PINNED_CLASSES[cls]


def __getattr__(name: str):
    """A pinned class by its name (Note [pinned classes by name])."""
    parts = name.split(_SEP)
    if len(parts) == 3 and parts[0] == "Pinned":
        import importlib

        module, qualname = (p.replace("_dot_", ".") for p in parts[1:])
        cls = importlib.import_module(module)
        for attr in qualname.split("."):
            cls = getattr(cls, attr)
        kind = _kind(cls) if isinstance(cls, type) else None
        if kind is not None:
            return _pinned_class(cls, kind[0])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _module(model, what: str):
    """``model`` when it is a torch.nn.Module, else UserError naming what it is."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{what}: model {type(model).__name__}: give a torch.nn.Module")
    return model


def pin(model, plans: Union[str, PlanFile], *, allow_environment: bool = False,
        group=None, strict: bool = False, ahead: Union[bool, int] = True,
        keep: Union[bool, str] = True) -> PinReport:
    """Route every convolution layer of ``model`` through the pinned op with the plans of
    ``plans`` (a plan file's path or a PlanFile), which become the process's plans.
    Refuses (UserError naming what differs) a file measured on another GPU, cuDNN,
    cudnn-frontend or torch unless ``allow_environment``. Returns what it pinned;
    :func:`cudnn_explorer.pin_counts` tells, after a step, what ran pinned.

    ``strict``: a convolution call that would not run a plan of the file raises
    StrictPinError naming its layer, direction and key, instead of running PyTorch's own
    convolution (process-wide, until plans are loaded again without it).

    With ``group`` (a torch.distributed process group, such as
    ``torch.distributed.group.WORLD``) pinning is a collective call of that group: its
    rank 0 reads the file and every rank pins its contents, so that every rank runs the
    same plans; every rank checks its own environment, and a difference on any rank is
    refused on all of them, naming the rank. Without it (the default) each process reads
    the file itself and waits for no other.

    ``ahead``: build every plan of the file now, on threads of its own (True: up to 8;
    an integer: that many; False: each on its first call), while the caller goes on; a
    first call waits for its own plan only. ``keep``: restore the plans cuDNN serialized
    in an earlier process instead of building them, and keep them for the next one, in
    a file beside the plan file (True), at a path (a string), or not at all (False).
    Both are Note [plans built ahead] and pinning/kept.py."""
    _module(model, "pin")  # before the plans load: a bad call changes nothing
    plans = os.fspath(plans) if isinstance(plans, os.PathLike) else plans
    strict, allow_environment = flag(strict, "strict"), flag(allow_environment,
                                                              "allow_environment")
    threads, kept_file = threads_of(ahead), kept_file_of(keep, plans if isinstance(plans, str)
                                                         else None)
    source, n, diffs = _load(plans, allow_environment, group, strict)
    _build_ahead(model, threads, kept_file)
    layers, skipped = [], []
    for name, m in model.named_modules():
        if getattr(type(m), "_cudnn_explorer_base", None) is not None:
            _NAMES[m] = name or "(the model)"
            layers.append(name or "(the model)")  # pinned before: stays pinned
            continue
        kind = _kind(type(m))
        if kind is None:
            continue
        why = _why_not(m, kind[1])
        if why:
            skipped.append(f"{name or '(the model)'}: {why}")
            continue
        m.__class__ = _pinned_class(type(m), kind[0])
        _NAMES[m] = name or "(the model)"
        layers.append(name or "(the model)")
    return PinReport(source=source, plans=n, layers=layers, skipped=skipped,
                     environment_differences=diffs)


# Note [classes made after pinning]: parametrizations (weight_norm, spectral_norm) and
# FSDP2's fully_shard give a layer a class of their own made from its class at that time:
# for a pinned layer, a subclass of the pinned class. Unpinning such a layer gives it the
# same class made again over the unpinned one (its own namespace kept, the pinned class
# replaced by its base in its bases), made once per class.
_UNPINNED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _unpinned_class(cls: type) -> type:
    base = cls.__dict__.get("_cudnn_explorer_base")
    if base is not None:  # a pinned class itself
        return base
    if cls not in _UNPINNED:
        bases = tuple(_unpinned_class(b) if getattr(b, "_cudnn_explorer_base", None)
                      is not None else b for b in cls.__bases__)
        namespace = {k: v for k, v in cls.__dict__.items()
                     if k not in ("__dict__", "__weakref__")}
        _UNPINNED[cls] = type(cls)(cls.__name__, bases, namespace)
    return _UNPINNED[cls]


def unpin(model) -> int:
    """Give every pinned layer of ``model`` its class back (a class made from the pinned
    one after pinning, by a parametrization or FSDP2, is made again over the unpinned
    class: Note [classes made after pinning]); returns how many. The plans stay loaded
    for other pinned code (op.clear_plans drops them)."""
    count = 0
    for m in _module(model, "unpin").modules():
        if getattr(type(m), "_cudnn_explorer_base", None) is not None:
            m.__class__ = _unpinned_class(type(m))
            _NAMES.pop(m, None)
            count += 1
    return count


@contextlib.contextmanager
def pinned(plans: Union[str, PlanFile], *, allow_environment: bool = False, group=None,
           strict: bool = False, ahead: Union[bool, int] = True, keep: Union[bool, str] = True):
    """A context in which ``torch.nn.functional.conv*d`` and ``conv_transpose*d`` calls (so
    every ``nn.Conv*`` layer too), in the thread that enters it, run through the pinned op
    with the plans of ``plans`` (Note [routing by the functions' names] in functional.py);
    yields the PinReport. The plans stay loaded after it. ``group`` and ``strict`` as for
    :func:`pin`, and ``ahead`` and ``keep`` too (for the current GPU)."""
    plans = os.fspath(plans) if isinstance(plans, os.PathLike) else plans
    strict, allow_environment = flag(strict, "strict"), flag(allow_environment,
                                                              "allow_environment")
    threads, kept_file = threads_of(ahead), kept_file_of(keep, plans if isinstance(plans, str)
                                                         else None)
    source, n, diffs = _load(plans, allow_environment, group, strict)
    _build_ahead(None, threads, kept_file)
    with functional.pinned_functions():
        yield PinReport(source=source, plans=n, environment_differences=diffs)
