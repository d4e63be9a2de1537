"""Capture what cuDNN sees of a model: every convolution of one iteration, as records.

The model runs one iteration (forward, and backward when training) under a
TorchDispatchMode. The mode sits below autocast, so each ``aten.convolution`` and
``aten.convolution_backward`` arrives with the dtypes and strides cuDNN gets.
ForwardTracker names the layer of each forward call; a backward call is named by its
forward call, which runs the same problem. Backward calls follow ``output_mask``: the first
layer computes no gradient of its input, so it has no backward-data problem. A transposed
convolution is recorded as the convolution PyTorch runs it as (Note [transposed]). No
cuDNN is needed, so this runs, and is tested, on the CPU.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from ..core.capture import (Capture, ModelSpec, Uncovered, UniqueConv, add_counts,
                            merge_sizes)
from ..core.errors import GpuMemoryError, ResourceError, UserError, described
from ..core.problem import DTYPES, ConvProblem, output_shape
from ..measure.tensors import conv_tf32

__all__ = ["capture", "capture_model", "iteration", "problem_of", "layout_of", "ForwardTracker",
           "not_covered", "explored", "forward_direction", "backward_directions", "layer_name",
           "ConvArgs", "conv_args", "PROBE_IMPORTS", "import_probe_modules"]

# Note [imports outside the first iteration]: the model child times PyTorch's first
# iteration with its probe in it (model/mode_child.py), so nothing the probe needs may be
# imported for the first time there. Two things were:
# * torch._dynamo. torch's TorchDispatchMode wraps a subclass's __torch_dispatch__ in
#   torch._disable_dynamo (unless the subclass opts out with _should_skip_dynamo), and
#   that wrapper imports torch._dynamo on its first call. The capture's mode and the
#   child's probe are such subclasses. A model whose library never imports torch._dynamo
#   (a user's own factory; torchvision and timm do) paid the import inside the first
#   iteration the report gives as PyTorch's: with torch 2.14 on a development machine, a
#   three-layer factory model's first iteration on the CPU took 0.93-1.03 s, against
#   8.3-8.6 ms with torch._dynamo imported before. The wrapper stays (it keeps dynamo from
#   tracing the mode's own frames when the model is compiled).
# * measure/tensors.py (and measure/native.py, which it imports), imported by layout_of
#   on the first convolution call of every model: about 35 ms on the same machine.
# The mode processes import PROBE_IMPORTS ahead with torch (mode_runner.preload), and the
# child's setup imports them where that did not happen (import_probe_modules); a test
# (tests/test_mode_process.py) checks that the first iteration imports no module at all.
PROBE_IMPORTS = ("torch._dynamo", "cudnn_explorer.measure.tensors")


def import_probe_modules() -> None:
    """Import PROBE_IMPORTS now, outside any timed region (Note [imports outside the
    first iteration]). One that does not import is left as it is: the probe then meets
    the same error where it always did."""
    from ..measure.prestart import import_ahead

    import_ahead(PROBE_IMPORTS)


_DTYPE_NAMES = {"torch.float32": "float32", "torch.float16": "float16",
                "torch.bfloat16": "bfloat16", "torch.float64": "float64"}


def layout_of(x, w) -> str:
    """The layout PyTorch's cuDNN path runs the call in (measure.tensors.cudnn_memory_format,
    ATen's own rule, as the pinned op's fake implementation decides it): NHWC when the
    input's or the weight's strides are like channels_last (Note [ambiguous strides]);
    float64 and 1-D convolutions never."""
    import torch

    from ..measure.tensors import cudnn_memory_format

    fmt = cudnn_memory_format(x, w)
    return "nhwc" if fmt in (torch.channels_last, torch.channels_last_3d) else "nchw"


# Note [ambiguous strides]: a tensor with C = 1 or H = W = 1 can be contiguous in both
# memory formats (a channels_last model's squeeze-and-excitation convolutions: x
# 16x120x1x1, strides 120,1,120,120). PyTorch decides by the strides alone (c10's
# is_channels_last_strides_2d/3d in c10/core/MemoryFormat.h, which
# Tensor::suggest_memory_format and so ATen's cudnn_conv_suggest_memory_format follow),
# and cuDNN then gets the tensors in that format: so a capture that called such a call
# NCHW (channels_last only when not also contiguous, as it did) explored another problem
# than PyTorch ran, and the pinned op, which keys the call by ATen's rule, found no plan
# for it (16 of MobileNetV3-Large's 62 calls on the H200). The capture and the op's fake
# implementation ask ATen itself (measure.tensors.cudnn_memory_format).


def not_covered(x) -> str:
    """Why a convolution with input ``x`` is not one the tool explores, or "" when it is."""
    if str(x.dtype) not in _DTYPE_NAMES:
        return f"dtype {x.dtype} (cuDNN convolutions here take {', '.join(DTYPES)})"
    if x.dim() not in (3, 4, 5):
        return f"{x.dim() - 2}-D convolution (1-D, 2-D and 3-D are explored)"
    return ""


# Note [transposed]: PyTorch runs a transposed convolution as the convolution it is the
# adjoint of, whose input has the transposed one's output shape (ATen
# cudnn/ConvShared.cpp): its forward as that convolution's backward-data, its input's
# gradient as that one's forward, its weight's gradient as that one's backward-filter,
# with the same tensors, so under the same cache keys. The capture records it as that
# problem and those directions; its layer is named "<layer> (transposed)".
def forward_direction(transposed: bool) -> str:
    """The direction cuDNN runs for an ``aten.convolution`` call."""
    return "bwd-data" if transposed else "fwd"


def backward_directions(transposed: bool) -> Tuple[str, str]:
    """The directions cuDNN runs for an ``aten.convolution_backward`` call's input
    gradient and weight gradient (its output_mask[0] and [1])."""
    return ("fwd", "bwd-filter") if transposed else ("bwd-data", "bwd-filter")


def layer_name(layer: str, transposed: bool) -> str:
    return f"{layer} (transposed)" if transposed else layer


class ConvArgs(NamedTuple):
    """What a convolution call runs on: ``aten.convolution``'s input, weight and geometry."""

    x: Any
    w: Any
    stride: Any
    padding: Any
    dilation: Any
    transposed: bool
    output_padding: Any
    groups: int


def conv_args(args, backward: bool) -> ConvArgs:
    """The ConvArgs of an ``aten.convolution`` call's ``args``, or (``backward``) of an
    ``aten.convolution_backward`` call's."""
    if backward:
        _, x, w, _, stride, padding, dilation, transposed, out_pad, groups, _ = args
    else:
        x, w, _, stride, padding, dilation, transposed, out_pad, groups = args
    return ConvArgs(x, w, stride, padding, dilation, bool(transposed), out_pad, groups)


def explored(c: ConvArgs, tf32: bool) -> Tuple[Optional[ConvProblem], str]:
    """(the call's problem, "") for a convolution call the tool explores, else (None, why
    not): PyTorch ran it (its call comes first), the tool cannot."""
    why = not_covered(c.x)
    if why:
        return None, why
    try:
        return problem_of(c.x, c.w, c.stride, c.padding, c.dilation, c.groups, tf32,
                          c.transposed, c.output_padding), ""
    except UserError as e:
        return None, f"not a problem the tool explores: {e}"


def problem_of(x, w, stride, padding, dilation, groups: int, tf32: bool,
               transposed: bool = False, output_padding=()) -> ConvProblem:
    """The ConvProblem of one convolution call: input ``x`` and weight ``w`` as cuDNN
    gets them; for a transposed call, the convolution PyTorch runs it as (Note
    [transposed])."""
    dtype = _DTYPE_NAMES[str(x.dtype)]
    shape = tuple(int(v) for v in x.shape)
    if transposed:  # the input of the convolution it is the adjoint of: x's output shape
        shape = tuple(output_shape(shape, [int(v) for v in w.shape],
                                   [int(v) for v in stride], [int(v) for v in padding],
                                   [int(v) for v in dilation], int(groups), True,
                                   [int(v) for v in output_padding or [0]]))
    problem = ConvProblem.create(shape, out_channels=int(w.shape[0]),
                                 kernel=tuple(w.shape[2:]), stride=tuple(stride),
                                 padding=tuple(padding), dilation=tuple(dilation),
                                 groups=int(groups), dtype=dtype, layout=layout_of(x, w),
                                 tf32=bool(tf32) if dtype == "float32" else None)
    if transposed and tuple(problem.output_shape[2:]) != tuple(x.shape[2:]):
        raise UserError(f"a transposed convolution whose output_padding "
                        f"{list(output_padding)} is not smaller than its stride "
                        f"{list(stride)}: no convolution has it as its adjoint")
    return problem


class _Recorder:
    """Collects calls in first-seen order, deduplicated on the problem."""

    def __init__(self, tf32: bool):
        self.tf32 = tf32
        self.unique: Dict[ConvProblem, UniqueConv] = {}
        self.uncovered: Dict[Tuple, Uncovered] = {}
        self.calls = 0

    def add(self, layer: Optional[str], direction_mask: Tuple[Tuple[str, bool], ...],
            c: ConvArgs) -> None:
        """One call of ``aten.convolution`` or of its backward, whose directions
        ``direction_mask`` names (Note [transposed])."""
        n = sum(1 for _, on in direction_mask if on)
        if n == 0:
            return
        self.calls += n
        p, why = explored(c, self.tf32)
        if layer is not None:
            layer = layer_name(layer, c.transposed)
        if p is None:
            key = (why, tuple(c.x.shape), tuple(c.w.shape))
            u = self.uncovered.setdefault(key, Uncovered(
                layer=layer or "(backward)", why=why, input_shape=list(c.x.shape),
                weight_shape=list(c.w.shape), dtype=str(c.x.dtype).replace("torch.", "")))
            u.calls += n
            return
        u = self.unique.setdefault(p, UniqueConv(problem=p))
        counted = {d: 1 for d, on in direction_mask if on}
        add_counts(u.calls, counted)
        if c.transposed:
            add_counts(u.transposed_calls, counted)
        if layer is not None and layer not in u.layers:
            u.layers.append(layer)


class ForwardTracker:
    """The innermost module of ``model`` running now, by its name ("layer1.0.conv1"), in
    the forward pass. Note [forward tracker]: torch.utils.module_tracker.ModuleTracker
    also hooks the backward pass (multi-grad hooks on every module's tensors); on the
    H200, a small net's later CUDA-graph capture failed in the model's child after a first
    iteration tracked by it, and succeeded after one without. Global forward hooks alone,
    removed on exit, leave nothing behind (the graph is timed in a process of its own
    anyway: Note [steady process] in model/mode_runner.py)."""

    def __init__(self, model):
        self._names = {id(m): name for name, m in model.named_modules() if name}
        self._model, self._root = model, type(model).__name__
        self._running: list = []
        self._handles: list = []

    def __enter__(self) -> "ForwardTracker":
        from torch.nn.modules.module import (register_module_forward_hook,
                                             register_module_forward_pre_hook)
        self._handles = [register_module_forward_pre_hook(self._enter_module),
                         register_module_forward_hook(self._leave_module)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()
        self._handles, self._running = [], []

    def _enter_module(self, module, args) -> None:
        self._running.append(module)

    def _leave_module(self, module, args, out) -> None:
        for k in range(len(self._running) - 1, -1, -1):  # the latest call of it
            if self._running[k] is module:
                del self._running[k]
                break

    def layer(self) -> str:
        if not self._running:
            return "(outside any module)"
        m = self._running[-1]
        return self._names.get(id(m)) or (self._root if m is self._model else type(m).__name__)


def capture(model, inputs: List, spec: ModelSpec, device: str,
            loss: Optional[Callable] = None) -> Capture:
    """Run one iteration of ``model`` on ``inputs`` (tensors already on ``device``, in the
    model's layout) as ``spec`` says (AMP, training or inference) and return every
    convolution cuDNN would run, deduplicated. ``loss`` maps the output to a scalar for
    the backward pass (default: the sum of every floating-point output)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    rec = _Recorder(tf32=conv_tf32())
    tracker = ForwardTracker(model)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            # PyTorch's own call first: a convolution it refuses stops the model there,
            # with PyTorch's message (below), before the tool records anything of it.
            out = func(*args, **kwargs)
            if func is aten.convolution.default:
                c = conv_args(args, backward=False)
                rec.add(tracker.layer(), ((forward_direction(c.transposed), True),), c)
            elif func is aten.convolution_backward.default:
                c, mask = conv_args(args, backward=True), args[10]
                # a backward call is named by its forward call (the same problem)
                d_input, d_weight = backward_directions(c.transposed)
                rec.add(None, ((d_input, bool(mask[0])), (d_weight, bool(mask[1]))), c)
            return out

    model.train(spec.train)
    t0 = time.perf_counter()
    try:
        with tracker, Mode():
            iteration(model, inputs, spec, device, loss)
    except torch.OutOfMemoryError:
        raise GpuMemoryError(
            f"out of GPU memory capturing {spec.describe()}: try a smaller --batch") from None
    except (UserError, ResourceError):
        raise
    except Exception as e:  # noqa: BLE001  (the user's model: any error is its own)
        if "CUDA error" in str(e) or "CUDNN_STATUS" in str(e):
            raise ResourceError(f"the GPU failed while capturing {spec.describe()}: "
                                f"{described(e)}") from None
        raise UserError(
            f"{spec.describe()}: the model failed on its input: {described(e)} (--input "
            f"sets the input's size, --eval runs inference; a model that takes other "
            f"inputs: --model pkg.module:factory with a wrapper)") from None
    seconds = time.perf_counter() - t0
    model.zero_grad(set_to_none=True)
    return Capture(model=spec, problems=list(rec.unique.values()),
                   uncovered=list(rec.uncovered.values()), conv_calls=rec.calls,
                   tf32=rec.tf32, deterministic=bool(torch.backends.cudnn.deterministic),
                   device=device, seconds=seconds)


def capture_model(spec: ModelSpec, device: str) -> Capture:
    """Build ``spec``'s model on ``device`` and capture one iteration, at each of its
    ``sizes`` when it has them (ModelSpec.at_size); the model's memory is given back."""
    import torch
    from dataclasses import replace

    from . import zoo

    model, inputs = zoo.build(replace(spec, sizes=[]), device)
    if spec.sizes:
        caps = []
        for size in spec.sizes:
            one = spec.at_size(size)
            caps.append(capture(model, zoo.make_inputs(one, device), one, device))
        cap = merge_sizes(caps, spec.sizes, spec)
    else:
        cap = capture(model, inputs, spec, device)
    del model, inputs
    if device.startswith("cuda"):
        torch.cuda.empty_cache()  # the measurements that follow get the memory back
    return cap


def iteration(model, inputs: List, spec: ModelSpec, device: str,
              loss: Optional[Callable] = None, autocast_cache: bool = True) -> None:
    """One iteration as ``spec`` says: the forward pass under autocast (AMP), and for
    training the backward pass from ``loss(output)`` (default: the sum of every
    floating-point output). The caller sets train or eval mode; gradients accumulate.
    ``autocast_cache`` False for a CUDA graph capture (autocast's cache of cast weights
    must not outlive the capture)."""
    import torch

    amp = {"off": None, "fp16": torch.float16, "bf16": torch.bfloat16}[spec.amp]
    with torch.autocast(torch.device(device).type, dtype=amp or torch.float32,
                        enabled=amp is not None, cache_enabled=autocast_cache):
        with torch.set_grad_enabled(spec.train):
            out = model(**inputs) if isinstance(inputs, dict) else model(*inputs)
    if spec.train:
        total = loss(out) if loss else _sum_outputs(out)
        total.backward()


def _sum_outputs(out):
    """A scalar from any model output (a tensor, or tuples, lists and dicts of them)."""
    import torch

    parts = []

    def walk(o):
        if isinstance(o, torch.Tensor):
            if o.is_floating_point() and o.requires_grad:
                parts.append(o.float().sum())
        elif isinstance(o, dict):
            for v in o.values():
                walk(v)
        elif isinstance(o, (list, tuple)):
            for v in o:
                walk(v)

    walk(out)
    if not parts:
        raise UserError("the model's output holds no tensor that needs a gradient: "
                        "nothing to run backward from (use --eval for inference)")
    return torch.stack(parts).sum()
