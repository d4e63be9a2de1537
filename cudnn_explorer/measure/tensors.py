"""GPU data for one direction of a problem: tensors as cuDNN sees them, the float64
reference, the output check, and native timing results as records."""
from __future__ import annotations

import contextlib
import functools
import math
from typing import Dict, NamedTuple, Optional

from ..core import analysis
from ..core.problem import ConvProblem
from . import native

__all__ = ["OUTPUT_OF", "REFERENCE", "make_tensors", "fill_tensors", "native_problem",
           "direction_data", "filled_direction_data",
           "reference", "fitting_reference", "reference_fits", "problem_view", "max_error", "Check",
           "check_output", "check_result", "tensor_bytes", "cudnn_memory_format",
           "conv_tf32_reader", "conv_tf32"]

REFERENCE = ("float64 on the same GPU from the same inputs, computed by PyTorch with cuDNN "
             "disabled")

# Which of (x, w, y) each direction writes; the other two are its inputs.
OUTPUT_OF = {"fwd": "y", "bwd-data": "x", "bwd-filter": "w"}


@functools.lru_cache(maxsize=None)
def conv_tf32_reader():
    """A function giving cuDNN convolutions' float32 setting as PyTorch's convolutions
    read it (``allowTF32CuDNN(Float32Op::CONV)``), as a hashable value: torch's
    per-operator getter ("tf32"; "ieee" or "none": no TF32) where it has one, since the
    legacy flag's getter raises once the convolutions' and the RNNs' settings differ
    (``torch.backends.cudnn.conv.fp32_precision`` set alone); else the legacy flag."""
    import torch

    getter = getattr(torch._C, "_get_fp32_precision_getter", None)
    if getter is not None:
        try:
            getter("cuda", "conv")
            return functools.partial(getter, "cuda", "conv")
        except (RuntimeError, TypeError):
            pass
    return torch._C._get_cudnn_allow_tf32


def conv_tf32() -> bool:
    """Whether cuDNN convolutions may use TF32 for float32 now."""
    return conv_tf32_reader()() in (True, "tf32")


def cudnn_memory_format(x, w):
    """The memory format PyTorch's cuDNN path gives a convolution of input ``x`` and
    weight ``w`` (tensors, fake ones too): ATen's own rule, cudnn_conv_suggest_memory_format,
    through the binding torch's FakeTensor convolution calls. channels_last (channels_last_3d
    for 5-D) when the input's or the weight's strides are like it, by c10's
    is_channels_last_strides_2d/3d (Note [ambiguous strides] in model/tracer.py);
    contiguous for float64, and for 1-D convolutions (ATen makes their input contiguous).
    Not torch._prims_common's Python copy of the stride rule: that copy has differed from
    c10's (a stride-1 dimension of size > 1 followed by a smaller stride: a transposed
    sequence given an axis of size 1, N x C x L x 1 with strides L*C, 1, C, 1, which c10
    calls contiguous)."""
    import torch

    if w.dim() not in (4, 5) or x.dim() != w.dim():
        return torch.contiguous_format
    return torch._C._conv_determine_backend_memory_format(x, w, torch._C._ConvBackend.Cudnn)


def _torch_dtype(torch, name: str):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float64": torch.float64}[name]


def make_tensors(problem: ConvProblem, direction: str, device: int = 0, seed: int = 0,
                 poison: bool = True, fill: bool = True):
    """Fresh tensors for one direction, as cuDNN sees them (1-D problems viewed as 2-D
    with H = 1), in the problem's dtype and layout: random inputs (inputs ~ N(0, 1),
    weight ~ N(0, 1/fan_in)) and the output filled with NaN so that an unwritten
    element cannot pass a check (random too with ``poison=False``, for callers such as
    PyTorch's own backward call that read all three). Returns {'x', 'w', 'y'}. With
    ``fill`` False they are only allocated (no GPU work): fill_tensors fills them later
    with the same values."""
    torch = native.require_gpu(device)
    dt = _torch_dtype(torch, problem.dtype)
    dev = torch.device("cuda", device)
    xs, ws, ys, *_ = problem.cudnn_params()
    shapes = {"x": xs, "w": ws, "y": ys}
    t = {}
    with _fitting(problem, direction, device, t):
        for name in ("x", "w", "y"):
            # Note [size-1 strides]: allocate in the layout's memory format outright.
            # `.contiguous(memory_format=...)` keeps a tensor that already counts as
            # contiguous in that format, strides of size-1 dims included: a depthwise
            # 64x1x3x3 weight kept NCHW strides (9, 9, 3, 1), which cuDNN reads as NCHW,
            # so on the H200 our graph got other engines (and a layout transform) than
            # PyTorch's, which normalises such strides (fixSizeOneDimStride) to the
            # channels_last (9, 1, 3, 1) that torch.empty gives here.
            fmt = torch.contiguous_format
            if problem.layout == "nhwc":
                fmt = torch.channels_last if len(shapes[name]) == 4 else torch.channels_last_3d
            t[name] = torch.empty(shapes[name], dtype=dt, device=dev, memory_format=fmt)
        if fill:
            fill_tensors(problem, direction, t, device, seed, poison)
    return t


@contextlib.contextmanager
def _fitting(problem: ConvProblem, direction: str, device: int, made: Optional[Dict] = None):
    """Out of GPU memory inside: the ResourceError that says what the direction's tensors
    need (``made``, the tensors made so far, dropped first)."""
    try:
        yield
    except RuntimeError as e:
        if not native.is_out_of_memory(e):
            raise
        if made is not None:
            made.clear()
        raise native.out_of_memory(f"for the {direction} tensors of {problem.describe()}",
                                   tensor_bytes(problem), device) from None


def fill_tensors(problem: ConvProblem, direction: str, t: Dict, device: int = 0,
                 seed: int = 0, poison: bool = True) -> None:
    """Fill tensors that make_tensors(..., fill=False) allocated with what make_tensors
    gives: the same values for the same ``seed``."""
    import torch

    dev = torch.device("cuda", device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    _, ws, _, *_ = problem.cudnn_params()
    fan_in = math.prod(ws[1:])
    out_name = OUTPUT_OF[direction]
    for name in ("x", "w", "y"):
        if name == out_name and poison:
            t[name].fill_(float("nan"))
        else:
            v = torch.randn(tuple(t[name].shape), generator=gen, device=dev,
                            dtype=torch.float32)
            if name == "w":
                v = v / math.sqrt(fan_in)
            t[name].copy_(v)


def tensor_bytes(problem: ConvProblem, check: bool = False) -> int:
    """GPU memory one direction's tensors take (x, w and y in the problem's dtype), plus
    the float64 reference's inputs and output with ``check``."""
    xs, ws, ys, *_ = problem.cudnn_params()
    n = sum(math.prod(s) for s in (xs, ws, ys))
    size = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}[problem.dtype]
    return n * size + (n * 8 if check else 0)


def native_problem(problem: ConvProblem, tensors: Dict):
    """The extension's Problem (descriptors) over ``tensors``."""
    _, _, _, pad, stride, dil = problem.cudnn_params()
    return native.Problem(tensors["x"], tensors["w"], tensors["y"], pad, stride, dil,
                          problem.groups, problem.math_type)


def direction_data(problem: ConvProblem, direction: str, device: int, seed: int, check: bool):
    """(tensors, native problem, reference, reference_on_cpu) of one direction, as the
    legacy rows and the engine worker measure it: make_tensors, the descriptors and, with
    ``check``, the float64 reference where it fits (else None, False); then PyTorch's
    cached memory goes back to the device.

    Note [cached memory and cuDNN]: the temporaries made on the way (the random inputs'
    float32 copies, the reference's float64 ones) are freed into PyTorch's cache, where
    cuDNN's own allocations (its handle's and Find's, made with cudaMalloc) cannot use
    them. On a GPU short of memory (2 GiB free on the H200) the default problem's bwd-data
    Find then failed with CUDNN_STATUS_INTERNAL_ERROR; Find's workspace is sized from the
    device's free memory as well."""
    tensors = make_tensors(problem, direction, device, seed)
    prob = native_problem(problem, tensors)
    return (tensors, prob, *_referenced(problem, direction, tensors, device, check))


def filled_direction_data(problem: ConvProblem, direction: str, tensors: Dict, device: int,
                          seed: int, check: bool):
    """(reference, reference_on_cpu) as direction_data makes them, for ``tensors`` that
    make_tensors(..., fill=False) allocated: filled now (fill_tensors), then the
    reference and the cached memory's return as there."""
    with _fitting(problem, direction, device):
        fill_tensors(problem, direction, tensors, device, seed)
    return _referenced(problem, direction, tensors, device, check)


def _referenced(problem: ConvProblem, direction: str, tensors: Dict, device: int,
                check: bool):
    """(reference, reference_on_cpu) of filled ``tensors``: with ``check``, the float64
    reference where it fits (else None, False); then PyTorch's cached memory goes back to
    the device (Note [cached memory and cuDNN])."""
    ref, on_cpu = fitting_reference(problem, direction, tensors, device) if check else (None,
                                                                                         False)
    native.release_cached_memory()
    return ref, on_cpu


def problem_view(problem: ConvProblem, t):
    """A tensor as cuDNN sees it (1-D problems as N,C,1,L) back in the problem's shape."""
    return t.squeeze(2) if problem.spatial_dims == 1 else t


class Check(NamedTuple):
    """An output checked against the reference (fields of records.AlgoResult & co.)."""

    max_error: Optional[float]
    tolerance: float
    output_finite: bool


def check_result(problem: ConvProblem, out, ref, math_type: str) -> Check:
    """``out`` (in the problem's shape) against ``ref``: max error relative to max |ref|,
    held to analysis.tolerance for the dtype and math type; NaN/Inf make it not finite."""
    err = max_error(out, ref)
    finite = math.isfinite(err)
    return Check(err if finite else None, analysis.tolerance(problem.dtype, math_type), finite)


def check_output(problem: ConvProblem, out, ref, math_type: str) -> Check:
    """check_result of ``out`` as cuDNN sees it (1-D problems as N,C,1,L)."""
    return check_result(problem, problem_view(problem, out), ref, math_type)


def max_error(out, ref) -> float:
    """max |out - ref| / max |ref| in float64; inf when ``out`` holds NaN or Inf (an
    unwritten or overflowed element)."""
    import torch

    # In slices along the batch: float64 copies of a whole output would need as much
    # memory again as the reference, which a nearly full GPU does not have.
    step = max(1, _CHUNK_ELEMENTS // max(1, out[0].numel())) if out.dim() else 1
    worst, scale = 0.0, 0.0
    for i in range(0, max(1, out.shape[0] if out.dim() else 1), step):
        o, r = (out, ref) if not out.dim() else (out[i:i + step], ref[i:i + step])
        if o.device != r.device:  # a reference on the CPU: Note [reference on the CPU]
            o = o.to(r.device)
        # one synchronisation per slice: a maximum propagates NaN, and |Inf| is Inf
        lo, hi = torch.aminmax(r)
        d, s = torch.stack(((o.double() - r).abs_().amax(), torch.maximum(-lo, hi))).tolist()
        if not math.isfinite(d):
            return float("inf")
        worst, scale = max(worst, d), max(scale, s)
    return worst / (scale if scale > 0 else 1.0)


_CHUNK_ELEMENTS = 1 << 24  # 128 MiB of float64 per slice


def reference(problem: ConvProblem, direction: str, tensors: Dict, on_cpu: bool = False):
    """The direction's output in float64, computed by PyTorch with cuDNN disabled (so
    independent of cuDNN), from the same inputs, on their device (``on_cpu``: on the CPU,
    from copies of them). Shaped like the problem."""
    import torch
    import torch.nn.functional as F

    nsp = problem.spatial_dims
    # float64 copies of the direction's two inputs only: its output holds NaN here, and a
    # copy of it would cost as much memory as the reference itself
    x, w, y = (None if k == OUTPUT_OF[direction]
               else (problem_view(problem, tensors[k]).cpu() if on_cpu
                     else problem_view(problem, tensors[k])).double().contiguous()
               for k in ("x", "w", "y"))
    kw = dict(stride=problem.stride, padding=problem.padding, dilation=problem.dilation,
              groups=problem.groups)
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nsp]
    grad_in = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input,
               3: torch.nn.grad.conv3d_input}[nsp]
    grad_w = {1: torch.nn.grad.conv1d_weight, 2: torch.nn.grad.conv2d_weight,
              3: torch.nn.grad.conv3d_weight}[nsp]
    with torch.backends.cudnn.flags(enabled=False):
        if direction == "fwd":
            return conv(x, w, **kw)
        if direction == "bwd-data":
            return grad_in(list(problem.input_shape), w, y, **kw)
        return grad_w(x, list(problem.weight_shape), y, **kw)


# Note [reference on the CPU]: the float64 reference takes 8 bytes per element of x, w and
# y on the GPU (its two inputs' copies and its output): 1.2 GiB for the default problem's
# forward direction. Where it would leave less than REFERENCE_HEADROOM_BYTES free, or less
# than half of what is free (a GPU shared with a training job; the engine worker there has
# less still, its own CUDA context taken), the rest would not hold Find's workspace and
# cuDNN's own allocations, so the reference is computed on the CPU, from copies of the same
# inputs, by the same PyTorch convolution in float64, and outputs are compared with it
# there, slice by slice (max_error). A reference that does not fit on the GPU after all is
# computed there too.
# The direction (or the engine configs) then records reference_on_cpu, and the report
# says so.


REFERENCE_HEADROOM_BYTES = 2 << 30


def reference_fits(problem: ConvProblem, free_bytes: Optional[int]) -> bool:
    """Whether the float64 reference should be computed on the GPU, which has
    ``free_bytes`` free beside the direction's tensors (None: it cannot say; yes): it
    must leave REFERENCE_HEADROOM_BYTES, or half of the free memory where that is less."""
    need = tensor_bytes(problem, check=True) - tensor_bytes(problem)
    return free_bytes is None or \
        need + min(free_bytes // 2, REFERENCE_HEADROOM_BYTES) <= free_bytes


def fitting_reference(problem: ConvProblem, direction: str, tensors: Dict, device: int):
    """(reference, on_cpu): the direction's float64 reference on the GPU when it fits
    there, else on the CPU (Note [reference on the CPU])."""
    if reference_fits(problem, native.free_bytes(device)):
        try:
            return reference(problem, direction, tensors), False
        except RuntimeError as e:
            if not native.is_out_of_memory(e):
                raise
            native.release_cached_memory()
    return reference(problem, direction, tensors, on_cpu=True), True
