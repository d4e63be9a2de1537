"""Exploration on the GPU: tensors, the native calls, and records out.

This is the layer that imports torch; it is itself imported lazily by the package.
"""
from __future__ import annotations

import datetime
import math
import socket
from typing import Dict, Iterable, Optional

from . import _native
from .errors import ResourceError, UserError
from .problem import DIRECTIONS, ConvProblem
from .records import (MIB, AlgoResult, DirectionResult, Environment, Exploration,
                      WorkspaceEntry)

__all__ = ["explore", "make_tensors", "run_algorithm", "reference", "environment", "info",
           "native_problem", "OUTPUT_OF"]

# Which of (x, w, y) each direction writes; the other two are its inputs.
OUTPUT_OF = {"fwd": "y", "bwd-data": "x", "bwd-filter": "w"}


def _torch_dtype(torch, name: str):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float64": torch.float64}[name]


def make_tensors(problem: ConvProblem, direction: str, device: int = 0, seed: int = 0):
    """Fresh tensors for one direction, as cuDNN sees them (1-D problems viewed as 2-D
    with H = 1), in the problem's dtype and layout: random inputs (inputs ~ N(0, 1),
    weight ~ N(0, 1/fan_in)) and the output filled with NaN so that an unwritten
    element cannot pass a check. Returns {'x', 'w', 'y'}."""
    torch = _native.require_gpu(device)
    dt = _torch_dtype(torch, problem.dtype)
    dev = torch.device("cuda", device)
    gen = torch.Generator(device=dev)
    gen.manual_seed(seed)
    xs, ws, ys, *_ = problem.cudnn_params()
    fan_in = math.prod(ws[1:])
    out_name = OUTPUT_OF[direction]
    shapes = {"x": xs, "w": ws, "y": ys}
    t = {}
    try:
        for name in ("x", "w", "y"):
            if name == out_name:
                t[name] = torch.full(shapes[name], float("nan"), dtype=dt, device=dev)
            else:
                v = torch.randn(shapes[name], generator=gen, device=dev, dtype=torch.float32)
                if name == "w":
                    v = v / math.sqrt(fan_in)
                t[name] = v.to(dt)
            if problem.layout == "nhwc":
                fmt = torch.channels_last if len(shapes[name]) == 4 else torch.channels_last_3d
                t[name] = t[name].contiguous(memory_format=fmt)
    except torch.OutOfMemoryError:
        raise ResourceError(
            f"out of GPU memory allocating the tensors of {problem.describe()}") from None
    return t


def native_problem(problem: ConvProblem, tensors: Dict):
    """The extension's Problem (descriptors) over ``tensors``."""
    _, _, _, pad, stride, dil = problem.cudnn_params()
    return _native.Problem(tensors["x"], tensors["w"], tensors["y"], pad, stride, dil,
                           problem.groups, problem.math_type)


def _row(r) -> AlgoResult:
    return AlgoResult(algo=r.algo, algo_name=r.algo_name, math_type=r.math_type,
                      status=r.status, status_code=r.status_code,
                      time_ms=(float(r.time_ms) if r.time_ms >= 0 and r.status_code == 0
                               else None),
                      workspace_bytes=int(r.memory_bytes), deterministic=bool(r.deterministic))


def _direction_result(rep, cap_bytes: Optional[int]) -> DirectionResult:
    d = DirectionResult(
        direction=rep.direction, math_type=rep.math_type,
        find=[_row(r) for r in rep.find],
        heuristics=[_row(r) for r in rep.heuristics],
        workspace=[WorkspaceEntry(w.algo, w.algo_name, w.math_type, w.status,
                                  None if w.bytes < 0 else int(w.bytes))
                   for w in rep.workspace],
        workspace_needed_bytes=int(rep.workspace_needed),
        workspace_given_bytes=int(rep.workspace_given),
        workspace_cap_bytes=cap_bytes, find_requested=int(rep.requested),
        find_returned=int(rep.returned))
    for h in d.heuristics:
        h.time_ms = None  # cudnnGet*_v7 does not time anything
    d.annotate()
    return d


def environment(device: int = 0) -> Environment:
    """Describe the GPU and the libraries in use (initialises CUDA on ``device``)."""
    torch = _native.require_gpu(device)
    props = torch.cuda.get_device_properties(device)
    built, running = _native.build_info(), _native.runtime_info()
    return Environment(
        gpu_name=props.name, compute_capability=f"{props.major}.{props.minor}",
        device_index=device, torch_version=torch.__version__,
        torch_cuda=str(torch.version.cuda), cudnn_torch=str(torch.backends.cudnn.version()),
        cudnn_runtime=running.get("cudnn", ""), cudnn_built=built.get("cudnn", ""),
        torch_built=built.get("torch", ""), cuda_runtime=running.get("cuda_runtime", ""),
        cuda_driver=running.get("cuda_driver", ""), hostname=socket.gethostname(),
    )


def explore(problem: ConvProblem, directions: Iterable[str] = DIRECTIONS, device: int = 0,
            max_workspace_mib: Optional[float] = None, seed: int = 0) -> Exploration:
    """List every legacy cuDNN algorithm for each direction of ``problem``.

    Returns an Exploration whose DirectionResults hold cudnnFind*Ex's rows (time in ms,
    workspace in bytes), the cudnnGet*_v7 heuristic order and every
    cudnnGet*WorkspaceSize answer. Runs on PyTorch's cuDNN handle and current stream on
    GPU ``device``. ``max_workspace_mib`` caps the workspace Find may use."""
    from . import __version__

    directions = list(directions)
    for d in directions:
        if d not in DIRECTIONS:
            raise UserError(f"--direction '{d}': valid: {', '.join(DIRECTIONS)}, all")
    if max_workspace_mib is not None and not max_workspace_mib >= 0:
        raise UserError(f"--max-workspace {max_workspace_mib}: must be >= 0 (MiB)")
    torch = _native.require_gpu(device)
    cap = None if max_workspace_mib is None else int(max_workspace_mib * MIB)
    env = environment(device)
    results = []
    with torch.cuda.device(device):
        for d in directions:
            tensors = make_tensors(problem, d, device, seed)
            p = native_problem(problem, tensors)
            try:
                rep = _native.find_algorithms(d, p, -1 if cap is None else cap)
            except torch.OutOfMemoryError:
                raise ResourceError(
                    f"out of GPU memory for the {d} workspace of {problem.describe()}; cap it "
                    f"with --max-workspace MiB") from None
            results.append(_direction_result(rep, cap))
            del p, tensors
    return Exploration(problem=problem, environment=env, directions=results,
                       tool_version=__version__,
                       created=datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds"))


def run_algorithm(problem: ConvProblem, direction: str, algo: int, math_type: str,
                  device: int = 0, seed: int = 0, tensors: Optional[Dict] = None):
    """Run one legacy algorithm once. Returns (tensors, output): ``tensors`` as from
    make_tensors (pass them in to reuse inputs) and the direction's output in the
    problem's own shape (1-D problems squeezed back)."""
    if tensors is None:
        tensors = make_tensors(problem, direction, device, seed)
    out = OUTPUT_OF[direction]
    tensors[out].fill_(float("nan"))
    p = native_problem(problem, tensors)
    _native.run_algorithm(direction, p, algo, math_type)
    result = tensors[out]
    if problem.spatial_dims == 1:
        result = result.squeeze(2)
    return tensors, result


def reference(problem: ConvProblem, direction: str, tensors: Dict):
    """The direction's output in float64, computed by PyTorch with cuDNN disabled (so
    independent of cuDNN), from the same inputs. Shaped like the problem."""
    import torch
    import torch.nn.functional as F

    nsp = problem.spatial_dims
    sq = (lambda t: t.squeeze(2)) if nsp == 1 else (lambda t: t)
    x, w, y = (sq(tensors[k]).double().contiguous() for k in ("x", "w", "y"))
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


def info(device: int = 0) -> dict:
    """Build-time vs running versions, and the GPUs; never raises for a missing GPU
    (that is reported in the result)."""
    import torch

    out = {"built": _native.build_info(), "running": _native.runtime_info(), "gpus": []}
    out["running"]["torch"] = torch.__version__
    out["running"]["cudnn_torch"] = (str(torch.backends.cudnn.version())
                                     if torch.backends.cudnn.is_available() else "")
    try:
        torch.cuda.init()
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({"index": i, "name": p.name, "cc": f"{p.major}.{p.minor}"})
    except Exception as e:  # no driver / no GPU: report it, --info still succeeds
        out["gpu_error"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    return out
