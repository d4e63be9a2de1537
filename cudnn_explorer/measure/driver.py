"""Is there a GPU at all? Asked of the NVIDIA driver itself (libcuda, through ctypes), in
milliseconds and without torch: a machine without one is told so before any worker
process starts or torch is imported (seconds). Only a sure "no" is reported: any answer
this module does not understand is left to torch's own check (native.require_gpu), which
follows.

cuInit here is the call torch makes first anyway; it creates no context and allocates no
GPU memory, and every process of ours is started by exec (never forked after it).
"""
from __future__ import annotations

import ctypes
import os
from typing import Callable, Optional

__all__ = ["no_gpu_reason", "DRIVER_LIBRARY"]

DRIVER_LIBRARY = "libcuda.so.1"
# CUresult codes that mean "no usable GPU here" (cuda.h)
_NO_GPU = {35: "CUDA_ERROR_INSUFFICIENT_DRIVER", 100: "CUDA_ERROR_NO_DEVICE",
           101: "CUDA_ERROR_INVALID_DEVICE", 803: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
           804: "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE"}


def _load() -> Optional[ctypes.CDLL]:
    try:
        return ctypes.CDLL(DRIVER_LIBRARY)
    except OSError:
        return None


def no_gpu_reason(load: Callable[[], Optional[object]] = _load) -> Optional[str]:
    """Why this machine surely has no usable CUDA GPU, in words, or None when it may have
    one (or the driver's answer is not one this function knows). ``load``: the driver
    library (ctypes), or None where it cannot be loaded; tests give a fake one."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) is not None and \
            os.environ["CUDA_VISIBLE_DEVICES"].strip() in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    lib = load()
    if lib is None:
        return f"no NVIDIA driver: {DRIVER_LIBRARY} cannot be loaded"
    try:
        rc = int(lib.cuInit(0))
        if rc in _NO_GPU:
            return f"the NVIDIA driver says {_NO_GPU[rc]}"
        if rc != 0:
            return None
        count = ctypes.c_int(-1)
        if int(lib.cuDeviceGetCount(ctypes.byref(count))) == 0 and count.value == 0:
            return "the NVIDIA driver sees no GPU; check CUDA_VISIBLE_DEVICES and nvidia-smi"
    except (AttributeError, OSError, TypeError, ValueError):
        return None
    return None
