"""Which GPU kernels a call launches, read with torch.profiler (CUDA activity).

Two calls that launch the same kernels run the same implementation: this is how a
PyTorch convolution is matched to the legacy algorithm (or engine) behind it
(core.knobs.same_kernels).
"""
from __future__ import annotations

import warnings
from typing import Callable, Tuple

__all__ = ["kernel_names"]

# Kernels that are not part of the convolution itself (our own poison fill, copies).
_IGNORE = ("fill", "Memset", "Memcpy", "memset", "memcpy")


def kernel_names(fn: Callable[[], object], repeats: int = 1) -> Tuple[str, ...]:
    """Sorted distinct names of the GPU kernels ``fn`` launches (after one warm-up call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle"
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                fn()
            torch.cuda.synchronize()
    names = set()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and not any(
                s in e.name for s in _IGNORE):
            names.add(e.name)
    return tuple(sorted(names))
