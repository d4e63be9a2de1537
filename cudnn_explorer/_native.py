"""The only module that imports the native extension ``cudnn_explorer._C``.

Imported lazily: ``import cudnn_explorer`` never loads torch, the extension or CUDA.
Every failure to load becomes one MissingDependencyError that says what is missing
and the command that fixes it; cuDNN failures become errors.CudnnError.
"""
from __future__ import annotations

import functools
import os
import re

from .errors import CudnnError, MissingDependencyError, UserError

__all__ = ["load", "require_gpu", "build_info", "runtime_info", "Problem", "find_algorithms",
           "workspace_size", "run_algorithm", "time_algorithm", "timing_options",
           "frontend_available", "engine_search"]

_REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
        from . import _C  # noqa: F401  (the one import of the extension)
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
            f"no usable CUDA GPU ({reason}); run on a machine with an NVIDIA GPU and "
            f"driver (nvidia-smi must list it)") from None
    n = torch.cuda.device_count()
    if n == 0:
        raise MissingDependencyError("no CUDA GPU is visible (torch.cuda.device_count() == 0); "
                                     "check CUDA_VISIBLE_DEVICES and nvidia-smi")
    if not 0 <= device < n:
        raise UserError(f"--device {device}: {n} GPU(s) visible; valid: 0..{n - 1}")
    return torch


_STATUS = re.compile(r"^(CUDNN_STATUS_[A-Z0-9_]+)")


def _call(fn, *args):
    C = load()
    try:
        return fn(*args)
    except C.CudnnError as e:
        text = str(e)
        m = _STATUS.match(text)
        raise CudnnError(f"cuDNN refused: {text}", m.group(1) if m else "CUDNN_STATUS_UNKNOWN") \
            from None
    except ValueError as e:
        raise UserError(str(e).splitlines()[0]) from None


def build_info() -> dict:
    """Versions the extension was compiled against: torch, cudnn, cuda_runtime."""
    return dict(load().build_info())


def runtime_info() -> dict:
    """Versions loaded now (cudnn, cudnn_cudart, cuda_runtime, cuda_driver)."""
    return dict(load().runtime_info())


def Problem(x, w, y, padding, stride, dilation, groups: int, math_type: str):
    """Native problem (descriptors built and validated once) over tensors x, w, y."""
    C = load()
    return _call(C.Problem, x, w, y, list(padding), list(stride), list(dilation), int(groups),
                 math_type)


def find_algorithms(direction: str, problem, max_workspace_bytes: int = -1):
    """Native FindReport for one direction (see csrc/find.h)."""
    return _call(load().find_algorithms, direction, problem, int(max_workspace_bytes))


def workspace_size(direction: str, problem, algo: int, math_type: str):
    """Native WorkspaceQuery: one independent cudnnGet*WorkspaceSize call."""
    return _call(load().workspace_size, direction, problem, int(algo), math_type)


def run_algorithm(direction: str, problem, algo: int, math_type: str) -> None:
    """Run one algorithm once; the direction's output tensor is overwritten."""
    _call(load().run_algorithm, direction, problem, int(algo), math_type)


def timing_options(budget_ms: float = 100.0, flush_l2: bool = False, graph: bool = True,
                   warmup_ms: float = 10.0):
    """Native TimingOptions (see csrc/timing.h): sampling budget and warm-up in ms."""
    opt = load().TimingOptions()
    opt.budget_ms = float(budget_ms)
    opt.flush_l2 = bool(flush_l2)
    opt.use_graph = bool(graph)
    opt.warmup_ms = float(warmup_ms)
    return opt


def time_algorithm(direction: str, problem, algo: int, math_type: str, budget_ms: float = 100.0,
                   flush_l2: bool = False, graph: bool = True, warmup_ms: float = 10.0):
    """Native TimingResult: steady-state per-launch samples in ms (see csrc/timing.h)."""
    return _call(load().time_algorithm, direction, problem, int(algo), math_type,
                 timing_options(budget_ms, flush_l2, graph, warmup_ms))


def frontend_available() -> bool:
    """Whether the extension was built with cudnn-frontend (engine configs)."""
    return bool(load().frontend_available())


def engine_search(direction: str, problem):
    """Native EngineSearch over one direction of ``problem`` (see csrc/engines.h)."""
    return _call(load().EngineSearch, direction, problem)
