"""Exploration on the GPU: tensors, the native calls, and records out.

This is the layer that imports torch; it is itself imported lazily by the package.
"""
from __future__ import annotations

import datetime
import math
import socket
from typing import Callable, Dict, Iterable, Optional

from . import _native, analysis
from .errors import ResourceError, UserError
from .problem import DIRECTIONS, ConvProblem
from .records import (MIB, AlgoResult, DirectionResult, Environment, Exploration, Measurement,
                      Timing, WorkspaceEntry)

REFERENCE = ("float64 on the same GPU from the same inputs, computed by PyTorch with cuDNN "
             "disabled")

__all__ = ["explore", "make_tensors", "run_algorithm", "reference", "environment", "info",
           "native_problem", "max_error", "OUTPUT_OF", "REFERENCE"]

# Which of (x, w, y) each direction writes; the other two are its inputs.
OUTPUT_OF = {"fwd": "y", "bwd-data": "x", "bwd-filter": "w"}


def _torch_dtype(torch, name: str):
    return {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
            "float64": torch.float64}[name]


def make_tensors(problem: ConvProblem, direction: str, device: int = 0, seed: int = 0,
                 poison: bool = True):
    """Fresh tensors for one direction, as cuDNN sees them (1-D problems viewed as 2-D
    with H = 1), in the problem's dtype and layout: random inputs (inputs ~ N(0, 1),
    weight ~ N(0, 1/fan_in)) and the output filled with NaN so that an unwritten
    element cannot pass a check (random too with ``poison=False``, for callers such as
    PyTorch's own backward call that read all three). Returns {'x', 'w', 'y'}."""
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
            if name == out_name and poison:
                t[name].fill_(float("nan"))
            else:
                v = torch.randn(shapes[name], generator=gen, device=dev, dtype=torch.float32)
                if name == "w":
                    v = v / math.sqrt(fan_in)
                t[name].copy_(v)
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
        find_returned=int(rep.returned), find_wall_ms=float(rep.find_wall_ms))
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
            max_workspace_mib: Optional[float] = None, seed: int = 0, retime: bool = True,
            budget_ms: float = 100.0, flush_l2: bool = False, graph: bool = True,
            check: bool = True, progress: Optional[Callable[[str], None]] = None,
            pytorch: bool = False, benchmark_limit: Optional[int] = None,
            child_timeout_s: float = 300.0, engines: bool = False,
            engine_max_per_engine: int = 8, engine_time_budget_s: Optional[float] = 120.0,
            engine_config_timeout_s: float = 60.0) -> Exploration:
    """List every legacy cuDNN algorithm for each direction of ``problem``.

    Returns an Exploration whose DirectionResults hold cudnnFind*Ex's rows (Find's own
    time in ms, workspace in bytes), the cudnnGet*_v7 heuristic order and every
    cudnnGet*WorkspaceSize answer. With ``retime`` every successful row is re-timed in
    steady state (``budget_ms`` of sampling per row; see csrc/timing.h) and with
    ``check`` its output is compared with a float64 reference (max error relative to
    max |ref|). Runs on PyTorch's cuDNN handle and current stream on GPU ``device``.
    ``max_workspace_mib`` caps the workspace Find may use. With ``pytorch``, PyTorch's own
    choice in every mode (pytorch_pick.default_modes) is measured in fresh child processes
    and attached to each DirectionResult as ``pytorch``. With ``engines``, every cuDNN 9
    engine of each direction is enumerated and a bounded set of knob configs per engine
    (``engine_max_per_engine``; ``engine_time_budget_s`` per direction) is built, timed
    and checked in worker processes, where a config that runs past
    ``engine_config_timeout_s`` or crashes is recorded as such (engine_worker)."""
    from . import __version__

    directions = list(directions)
    for d in directions:
        if d not in DIRECTIONS:
            raise UserError(f"--direction '{d}': valid: {', '.join(DIRECTIONS)}, all")
    if max_workspace_mib is not None and not max_workspace_mib >= 0:
        raise UserError(f"--max-workspace {max_workspace_mib}: must be >= 0 (MiB)")
    if not budget_ms >= 0:
        raise UserError(f"--budget-ms {budget_ms}: must be >= 0")
    if benchmark_limit is not None and benchmark_limit < 0:
        raise UserError(f"--benchmark-limit {benchmark_limit}: must be >= 0 (0 = all)")
    torch = _native.require_gpu(device)
    if engines and not _native.frontend_available():
        from .errors import MissingDependencyError

        raise MissingDependencyError(
            "this build of cudnn_explorer._C has no cudnn-frontend, so it cannot list engine "
            f"configs; pip install nvidia-cudnn-frontend, then rebuild: {_native.BUILD_HINT} "
            "(or run without --engines)")
    say = progress or (lambda msg: None)
    cap = None if max_workspace_mib is None else int(max_workspace_mib * MIB)
    env = environment(device)
    peak_any = analysis.peak_for(env.gpu_name, problem.dtype, problem.math_type)
    measurement = Measurement(
        retimed=retime, budget_ms=budget_ms if retime else None, flush_l2=flush_l2, graph=graph,
        reference=REFERENCE if check else "",
        peak_source=analysis.PEAK_SOURCE if peak_any else f"no peak table entry for "
                                                          f"{env.gpu_name}",
        bandwidth_gbs=peak_any.gbs if peak_any else None)
    results = []
    picks = {}

    def run_children():
        from . import pytorch_pick

        return pytorch_pick.pytorch_picks(
            problem, directions, pytorch_pick.default_modes(benchmark_limit), device=device, seed=seed, budget_ms=budget_ms, timeout_s=child_timeout_s,
            progress=say)

    if pytorch and engines:  # first: PyTorch's picks seed the engine-config search
        picks = run_children()
    with torch.cuda.device(device):
        for d in directions:
            say(f"{d}: cudnnFind")
            tensors = make_tensors(problem, d, device, seed)
            p = native_problem(problem, tensors)
            try:
                rep = _native.find_algorithms(d, p, -1 if cap is None else cap)
            except torch.OutOfMemoryError:
                raise ResourceError(
                    f"out of GPU memory for the {d} workspace of {problem.describe()}; cap it "
                    f"with --max-workspace MiB") from None
            res = _direction_result(rep, cap)
            res.flops = analysis.flops(problem, d)
            res.min_bytes = analysis.min_bytes(problem, d)
            ref = reference(problem, d, tensors) if check else None
            ok_rows = [r for r in res.find if r.ok]
            for i, r in enumerate(ok_rows, 1):
                peak = analysis.peak_for(env.gpu_name, problem.dtype, r.math_type)
                if peak:
                    r.peak_tflops, r.peak_unit = peak.tflops, peak.unit
                if retime or check:
                    say(f"{d}: {'re-timing' if retime else 'checking'} {i}/{len(ok_rows)} "
                        f"{r.algo_name} ({r.math_type})")
                _measure_row(problem, d, p, tensors, r, ref, retime, budget_ms, flush_l2,
                             graph)
                if pytorch or engines:  # each legacy row's kernels, to match others to
                    from . import kernels

                    r.kernels = list(kernels.kernel_names(
                        lambda r=r, p=p, d=d: _native.run_algorithm(d, p, r.algo, r.math_type)))
            if pytorch and engines:
                from . import pytorch_pick

                res.pytorch = picks[d]
                pytorch_pick.attach_legacy(res.pytorch, ok_rows)
            if engines:  # in worker processes: a config can hang or crash its process
                from .engine_worker import explore_isolated

                res.engines = explore_isolated(
                    problem, d, device, seed, legacy_rows=ok_rows,
                    preferred_tags=[t for pk in res.pytorch for t in
                                    ([pk.engine_tag] if pk.engine_tag else [])
                                    + [t for t, _ in pk.timed]],
                    max_per_engine=engine_max_per_engine, time_budget_s=engine_time_budget_s,
                    budget_ms=min(budget_ms, 20.0) if retime else 0.0, graph=graph,
                    check=check, config_timeout_s=engine_config_timeout_s, progress=say)
            results.append(res)
            del p, tensors, ref
    if pytorch and not engines:
        from . import pytorch_pick

        torch.cuda.empty_cache()  # leave the GPU's memory to the children
        picks = run_children()
        for r in results:
            r.pytorch = picks[r.direction]
            pytorch_pick.attach_legacy(r.pytorch, [x for x in r.find if x.ok])
    return Exploration(problem=problem, environment=env, directions=results,
                       tool_version=__version__,
                       created=datetime.datetime.now(datetime.timezone.utc).isoformat(
                           timespec="seconds"),
                       measurement=measurement)


def _measure_row(problem, direction, p, tensors, r: AlgoResult, ref, retime, budget_ms,
                 flush_l2, graph) -> None:
    """Re-time one successful row and/or check its output against ``ref``."""
    out = tensors[OUTPUT_OF[direction]]
    out.fill_(float("nan"))  # poison: an element the algorithm does not write stays NaN
    if retime:
        t = _native.time_algorithm(direction, p, r.algo, r.math_type, budget_ms, flush_l2,
                                   graph)
        r.timing = timing_from_native(t)
    elif ref is not None:
        _native.run_algorithm(direction, p, r.algo, r.math_type)
    if ref is not None:
        check_output(problem, r, out, ref, r.math_type)


def timing_from_native(t) -> Timing:
    """Timing record of a native TimingResult."""
    return Timing.from_samples(t.per_launch_ms, t.launches_per_sample, t.method,
                               t.warmup_launches, t.note)


def problem_view(problem: ConvProblem, t):
    """A tensor as cuDNN sees it (1-D problems as N,C,1,L) back in the problem's shape."""
    return t.squeeze(2) if problem.spatial_dims == 1 else t


def check_output(problem: ConvProblem, record, out, ref, math_type: str) -> None:
    """Set ``record``'s max_error, tolerance and output_finite from ``out`` vs ``ref``."""
    record.tolerance = analysis.tolerance(problem.dtype, math_type)
    err = max_error(problem_view(problem, out), ref)
    record.output_finite = math.isfinite(err)
    record.max_error = err if record.output_finite else None


def max_error(out, ref) -> float:
    """max |out - ref| / max |ref| in float64; inf when ``out`` holds NaN or Inf (an
    unwritten or overflowed element)."""
    import torch

    diff = (out.double() - ref).abs()
    if not torch.isfinite(diff).all():
        return float("inf")
    scale = ref.abs().max().item()
    return diff.max().item() / (scale if scale > 0 else 1.0)


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
    return tensors, problem_view(problem, tensors[out])


def reference(problem: ConvProblem, direction: str, tensors: Dict):
    """The direction's output in float64, computed by PyTorch with cuDNN disabled (so
    independent of cuDNN), from the same inputs. Shaped like the problem."""
    import torch
    import torch.nn.functional as F

    nsp = problem.spatial_dims
    x, w, y = (problem_view(problem, tensors[k]).double().contiguous() for k in ("x", "w", "y"))
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
