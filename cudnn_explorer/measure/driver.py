"""Is there a GPU at all? Asked of the NVIDIA driver itself (libcuda, through ctypes), in
milliseconds and without torch: a machine without one is told so before any worker
process starts or torch is imported (seconds). Only a sure "no" is reported: any answer
this module does not understand is left to torch's own check (native.require_gpu), which
follows.

cuInit here is the call torch makes first anyway; it creates no context and allocates no
GPU memory, and every process of ours is started by exec (never forked after it). It is
made only where the kernel driver lists no GPU (Note [no cuInit where a GPU is listed]).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable, Optional

__all__ = ["no_gpu_reason", "DRIVER_LIBRARY"]

DRIVER_LIBRARY = "libcuda.so.1"
_PROC_DRIVER = "/proc/driver/nvidia"
# CUresult codes that mean "no usable GPU here" (cuda.h)
_NO_GPU = {35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE",
           101: "CUDA_ERROR_INVALID_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
           804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}


def _load() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return None


def _proc_gpus() -> Optional[int]:
    """How many GPUs the NVIDIA kernel driver lists (/proc/driver/nvidia/gpus), or None
    where it lists none there (no driver, a container without /proc's driver files,
    WSL)."""
    try:
        return len(os.listdir(os.path.join(_PROC_DRIVER, "gpus"))) or None
    except OSError:
        return None


def no_gpu_reason(load: Callable[[], Optional[object]] = _load,
                  gpus: Callable[[], Optional[int]] = _proc_gpus) -> Optional[str]:
    """Why this machine surely has no usable CUDA GPU, in words, or None when it may have
    one (or the driver's answer is not one this function knows). ``load``: the driver
    library (ctypes), or None where it cannot be loaded; ``gpus``: the GPUs the kernel
    driver lists; tests give fakes. Note [no cuInit where a GPU is listed]: where the
    kernel driver lists a GPU the answer is None without loading libcuda, so that a
    process that will use its GPU (or a caller's process, through the API) is not made
    to initialise the CUDA driver ahead of torch (a fork after cuInit breaks CUDA in the
    child, and torch sets its lazy module loading before its own cuInit)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) is not None and \
            os.environ["CUDA_VISIBLE_DEVICES"].strip() in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    if gpus():
        return None
    os.environ.setdefault("CUDA_MODULE_LOADING", "LAZY")  # as torch sets it before cuInit
    lib = load()
    if lib is None:
        return f"no NVIDIA driver: {DRIVER_LIBRARY} not found"
    try:
        rc = int(lib.cuInit(0))
        if rc in _NO_GPU:
            return f"the NVIDIA driver says {_NO_GPU[rc]}"
        if rc != 0:
            return None
        count = ctypes.c_int(-1)
        if int(lib.cuDeviceGetCount(ctypes.byref(count))) == 0 and count.value == 0:
            return "the NVIDIA driver sees no GPU; check CUDA_VISIBLE_DEVICES"
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    return None
