"""Child process that runs PyTorch's own convolution for one problem and reports what it
cost. PyTorch's benchmark cache lives per process and ignores the benchmark flag once a
shape has run (docs/method.md), so every mode runs in a fresh child:

    python -m cudnn_explorer.measure.problem_child SPEC.json RESULT.json

SPEC: {"problem": ConvProblem.to_dict(), "directions": [...], "mode": "benchmark" |
"heuristic" | "deterministic", "benchmark_limit": int | null, "device": int, "seed": int,
"timing": TimingSpec fields, "check": bool, "log_file": path | null}: the parent's own
timing options, applied unchanged. The parent sets the logging environment
(cudnn-frontend's CUDNN_FRONTEND_LOG_*, cuDNN's CUDNN_LOGLEVEL_DBG / CUDNN_LOGDEST_DBG,
TORCH_CUDNN_V8_API_DISABLED) before this process starts.

RESULT: a ProblemChildResult (core/child_records.py): per direction its FirstCall (the
first call's cost, the steady Timing, the kernels, the check against the reference, the
byte span of the log written during the first call), and the settings PyTorch ran under.
"""
from __future__ import annotations

import os
import sys
import time

from ..core.child_records import Checked, FirstCall, ProblemChildResult
from .procs import log_size, quick_exit, read_spec, write_result


def torch_call(problem, direction, t):
    """PyTorch's own call for one direction, on tensors t = {'x','w','y'} (y = dy)."""
    import torch

    from .tensors import problem_view

    nsp = problem.spatial_dims
    x, w, y = (problem_view(problem, t[k]) for k in ("x", "w", "y"))
    stride, padding, dilation = list(problem.stride), list(problem.padding), list(problem.dilation)
    if direction == "fwd":
        conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
                3: torch.nn.functional.conv3d}[nsp]
        return lambda: conv(x, w, None, stride, padding, dilation, problem.groups)
    mask = [True, False, False] if direction == "bwd-data" else [False, True, False]
    return lambda: torch.ops.aten.convolution_backward(
        y, x, w, None, stride, padding, dilation, False, [0] * nsp, problem.groups, mask)


# A run's phases, in the order they come: the CUDA context; per direction its tensors,
# its first call (PyTorch's search, when benchmarking), its check against the float64
# reference, its kernels read, its steady-state calls and re-timing.
PHASES = ("cuda", "tensors", "first calls", "checks", "kernels", "steady")


def run(spec: dict) -> ProblemChildResult:
    import torch

    from ..core.options import TimingSpec
    from ..core.problem import ConvProblem
    from . import kernels, tensors, timing

    problem = ConvProblem.from_dict(spec["problem"])
    device = int(spec.get("device", 0))
    torch.cuda.set_device(device)
    mode = spec["mode"]
    torch.backends.cudnn.benchmark = mode == "benchmark"
    torch.backends.cudnn.deterministic = mode == "deterministic"
    if spec.get("benchmark_limit") is not None:
        torch.backends.cudnn.benchmark_limit = int(spec["benchmark_limit"])
    torch.backends.cudnn.allow_tf32 = bool(problem.tf32) if problem.dtype == "float32" else True
    log = spec.get("log_file")
    settings = {"benchmark": torch.backends.cudnn.benchmark,
                "deterministic": torch.backends.cudnn.deterministic,
                "benchmark_limit": torch.backends.cudnn.benchmark_limit,
                "allow_tf32": torch.backends.cudnn.allow_tf32,
                "v8_api_disabled": os.environ.get("TORCH_CUDNN_V8_API_DISABLED") == "1"}
    calls = []
    spec_t = TimingSpec(**spec["timing"])
    check = bool(spec.get("check", True))
    phases = dict.fromkeys(PHASES, 0.0)  # where this run's wall time went (s)
    lap = time.perf_counter()

    def spent(phase: str) -> None:
        nonlocal lap
        now = time.perf_counter()
        phases[phase] += now - lap
        lap = now

    torch.zeros(1, device="cuda")  # CUDA context outside the first-call measurement
    spent("cuda")
    for d in spec["directions"]:
        # PyTorch's backward call reads all three tensors: no NaN poison anywhere.
        t = tensors.make_tensors(problem, d, device, int(spec.get("seed", 0)), poison=False)
        fn = torch_call(problem, d, t)
        torch.cuda.synchronize()
        spent("tensors")
        torch.cuda.reset_peak_memory_stats()
        alloc0, res0 = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
        start = log_size(log)
        t0 = time.perf_counter()
        result = fn()
        torch.cuda.synchronize()
        first_ms = (time.perf_counter() - t0) * 1e3
        end = log_size(log)
        first_peak = torch.cuda.max_memory_allocated() - alloc0
        first_res = torch.cuda.memory_reserved() - res0
        spent("first calls")
        checked = None
        if check:  # the same reference and bound as our rows (PyTorch's math rule), on
            # the CPU where the GPU has no room for it (Note [reference on the CPU])
            ref, _ = tensors.fitting_reference(problem, d, t, device)
            got = next(o for o in result if o is not None) if isinstance(
                result, (tuple, list)) else result  # the gradient output_mask asked for
            checked = Checked(**tensors.check_result(problem, got, ref,
                                                     problem.math_type)._asdict())
            del ref
        del result
        spent("checks")
        names = kernels.kernel_names(fn)
        spent("kernels")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        alloc1 = torch.cuda.memory_allocated()
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        steady_peak = torch.cuda.max_memory_allocated() - alloc1
        steady = timing.time_callable(fn, spec_t) if spec_t.retime else None
        spent("steady")
        calls.append(FirstCall(
            direction=d, first_call_ms=first_ms, first_peak_alloc_bytes=first_peak,
            first_reserved_growth_bytes=first_res, steady=steady,
            steady_peak_alloc_bytes=steady_peak, kernels=list(names), check=checked,
            log_span=[start, end]))
    return ProblemChildResult(directions=calls, settings=settings, torch=torch.__version__,
                              cudnn=torch.backends.cudnn.version(), phases_s=phases)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = read_spec(argv, "python -m cudnn_explorer.measure.problem_child SPEC.json RESULT.json")
    if spec is None:
        return 2
    write_result(argv[1], run(spec).to_dict())
    return 0


if __name__ == "__main__":
    quick_exit(main())  # Note [quick exit] in measure/procs.py
