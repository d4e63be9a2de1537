"""The only module that imports the native extension ``cudnn_explorer._C``.

Imported lazily: ``import cudnn_explorer`` never loads torch, the extension or CUDA.
Every failure to load becomes one MissingDependencyError that says what is missing
and the command that fixes it. Every native failure arrives as the extension's one
NativeError (kind, status, call; Note [one native error path] in csrc/common.h) and
leaves this module as one of the project's error classes (:func:`translate`).
"""
from __future__ import annotations

import functools
import os
from typing import Optional

from ..core.errors import (CudnnError, ExplorerError, GpuError, GpuMemoryError,
                           MissingDependencyError, UserError)
from ..core.options import TimingSpec

__all__ = ["load", "require_gpu", "build_info", "runtime_info", "Problem", "find_algorithms",
           "workspace_size", "run_algorithm", "time_algorithm", "timing_options",
           "frontend_available", "engine_search", "translate", "call", "is_out_of_memory",
           "free_bytes", "out_of_memory"]

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD_HINT = f"pip install --no-build-isolation --no-deps -e {_REPO}"


@functools.lru_cache(maxsize=None)
def load():
    """Return the native module, or raise MissingDependencyError saying how to fix it."""
    try:
        import torch
    except ImportError as e:
        raise MissingDependencyError(
            f"PyTorch is not installed ({e}); install it: pip install torch") from None
    try:
        from .. import _C  # noqa: F401  (the one import of the extension)
    except ImportError as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        if "undefined symbol" in msg and any(s in msg for s in ("c10", "at6", "torch", "pybind")):
            why = (f"it was built against another torch than the running {torch.__version__} "
                   f"({msg})")
        elif "undefined symbol" in msg:
            why = f"a library it needs is not linked or not loaded ({msg})"
        else:
            why = f"it is not built ({msg})"
        raise MissingDependencyError(
            f"the native module cudnn_explorer._C cannot be loaded: {why}; build it with: "
            f"{BUILD_HINT}") from None
    return _C


def require_gpu(device: int = 0):
    """Check that CUDA device ``device`` is usable; returns torch. Raises
    MissingDependencyError (no GPU / driver) or UserError (bad index)."""
    load()
    import torch

    if not torch.backends.cudnn.is_available():
        raise MissingDependencyError(
            f"torch {torch.__version__} has no cuDNN; install a CUDA build of torch")
    try:
        torch.cuda.init()
    except Exception as e:  # torch raises several types for a missing driver / GPU
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise MissingDependencyError(
            f"no usable CUDA GPU ({reason}); run where nvidia-smi lists a GPU") from None
    n = torch.cuda.device_count()
    if n == 0:
        raise MissingDependencyError("no CUDA GPU is visible (torch.cuda.device_count() == 0); "
                                     "check CUDA_VISIBLE_DEVICES and nvidia-smi")
    if not 0 <= device < n:
        raise UserError(f"--device {device}: {n} GPU(s) visible; valid: 0..{n - 1}")
    return torch


# CUDA errors that mean the machine has no usable GPU or driver, not a fault of ours.
_NO_GPU = ("cudaErrorInsufficientDriver", "cudaErrorNoDevice", "cudaErrorInvalidDevice",
           "cudaErrorSystemDriverMismatch", "cudaErrorCompatNotSupportedOnDevice")
_OOM = ("cudaErrorMemoryAllocation", "CUDNN_STATUS_ALLOC_FAILED",
        "CUDNN_STATUS_ALLOC_FAILED_HOST_ALLOCATION")


def translate(e: BaseException, what: str) -> ExplorerError:
    """The project's error for a failure raised by a native call doing ``what``: the
    extension's NativeError by its kind and status, torch's out-of-memory, a ValueError
    (bad argument), or any other RuntimeError raised inside torch code we called."""
    import torch

    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    kind, status = getattr(e, "kind", None), getattr(e, "status", "")
    if isinstance(e, torch.OutOfMemoryError) or status in _OOM:
        return GpuMemoryError(f"out of GPU memory {what}: {first}")
    if kind == "argument" or (kind is None and isinstance(e, ValueError)):
        return UserError(f"{what}: {first}")
    if kind in ("cudnn", "frontend"):
        return CudnnError(f"cuDNN refused {what}: {first}", status or "CUDNN_STATUS_UNKNOWN")
    if status in _NO_GPU:
        return MissingDependencyError(f"no usable CUDA GPU {what}: {first}")
    if kind == "cuda":
        return GpuError(f"CUDA failed {what}: {first}")
    if kind == "internal":
        return ExplorerError(f"a check in the native module failed {what}: {first}")
    return GpuError(f"the native call failed {what}: {first}")


def is_out_of_memory(e: BaseException) -> bool:
    """torch's OutOfMemoryError, or a CUDA error that says out of memory (an
    AcceleratorError from a kernel launch or from creating a context or handle)."""
    import torch

    return isinstance(e, torch.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e).lower())


def free_bytes(device: int) -> Optional[int]:
    """Free memory on ``device`` now (cudaMemGetInfo), None when it cannot be asked."""
    import torch

    try:
        return int(torch.cuda.mem_get_info(device)[0])
    except Exception:  # noqa: BLE001  (asking must not replace the error being reported)
        return None


def release_cached_memory() -> None:
    """Return PyTorch's cached, unused GPU memory to the device (torch.cuda.empty_cache),
    where cuDNN's own allocations and other processes can use it; a no-op before CUDA is
    initialised."""
    import torch

    if torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def out_of_memory(what: str, need_bytes: int, device: int) -> GpuMemoryError:
    """GpuMemoryError for ``what`` needing ``need_bytes``, with what the GPU has free."""
    free = free_bytes(device)
    have = "" if free is None else f", {free / 2**20:.0f} MiB free"
    return GpuMemoryError(f"out of GPU memory {what}: needs about {need_bytes / 2**20:.0f} MiB"
                          f"{have} on GPU {device}")


def call(what: str, fn, *args):
    """``fn(*args)``, with any native failure turned into the project's error (translate)."""
    C = load()
    import torch

    try:
        return fn(*args)
    except ExplorerError:
        raise  # already the project's error (a gated call inside ``fn``)
    except (C.NativeError, torch.OutOfMemoryError, ValueError, RuntimeError) as e:
        raise translate(e, what) from None


def build_info() -> dict:
    """Versions the extension was compiled against: torch, cudnn, cuda_runtime,
    cudnn_frontend ("" when built without it)."""
    return dict(load().build_info())


def runtime_info() -> dict:
    """Versions loaded now (cudnn, cudnn_cudart, cuda_runtime, cuda_driver)."""
    return dict(load().runtime_info())


def Problem(x, w, y, padding, stride, dilation, groups: int, math_type: str):
    """Native problem (descriptors built and validated once) over tensors x, w, y."""
    return call("building the descriptors", load().Problem, x, w, y, list(padding),
                list(stride), list(dilation), int(groups), math_type)


def find_algorithms(direction: str, problem, max_workspace_bytes: int, math_types):
    """Native FindReport for one direction: Find under each of ``math_types``, the first
    PyTorch's (see csrc/find.h)."""
    return call(f"finding {direction} algorithms", load().find_algorithms, direction, problem,
                int(max_workspace_bytes), list(math_types))


def workspace_size(direction: str, problem, algo: int, math_type: str):
    """Native WorkspaceQuery: one independent cudnnGet*WorkspaceSize call."""
    return call(f"querying a {direction} workspace size", load().workspace_size, direction,
                problem, int(algo), math_type)


def run_algorithm(direction: str, problem, algo: int, math_type: str) -> None:
    """Run one algorithm once; the direction's output tensor is overwritten."""
    call(f"running {direction} algorithm {algo} ({math_type})", load().run_algorithm,
         direction, problem, int(algo), math_type)


def timing_options(spec: TimingSpec, cutoff_ms: float = 0.0, kernels: bool = False):
    """Native TimingOptions (see csrc/timing.h) of ``spec``: sampling budget, warm-up and
    one sample's GPU time in ms, L2 flush, graph, and the eager wall-clock loop's budget;
    ``cutoff_ms`` > 0 ends the timing of a launch slower than that (Note [cut launches] in
    csrc/timing.cpp); ``kernels``: read the kernels from the captured graph; a round's
    spec (``eager`` False) is timed batched."""
    opt = load().TimingOptions()
    opt.cutoff_ms = float(cutoff_ms)
    opt.kernels = bool(kernels)
    opt.budget_ms = float(spec.budget_ms)
    opt.flush_l2 = bool(spec.flush_l2)
    opt.use_graph = bool(spec.graph)
    opt.warmup_ms = float(spec.warmup_ms)
    opt.sample_target_ms = float(spec.sample_ms)
    opt.eager_budget_ms = float(spec.eager_budget_ms)
    # a staged search's rounds (no eager loop: their times only rank), Note [batched
    # rounds] in csrc/timing.cpp
    opt.batched = spec.retime and not spec.eager
    return opt


def time_algorithm(direction: str, problem, algo: int, math_type: str, spec: TimingSpec,
                   kernels: bool = False, cutoff_ms: float = 0.0):
    """Native TimingResult: steady-state per-launch samples in ms (see csrc/timing.h),
    with the kernels of one launch when ``kernels`` (and a graph could name them);
    ``cutoff_ms`` > 0: Note [cut launches] in csrc/timing.cpp."""
    return call(f"timing {direction} algorithm {algo} ({math_type})", load().time_algorithm,
                direction, problem, int(algo), math_type,
                timing_options(spec, cutoff_ms, kernels))


def frontend_available() -> bool:
    """Whether the extension was built with cudnn-frontend (engine configs)."""
    return bool(load().frontend_available())


def engine_search(direction: str, problem):
    """Native EngineSearch over one direction of ``problem`` (see csrc/engines.h)."""
    return call(f"building the {direction} operation graph", load().EngineSearch, direction,
                problem)
