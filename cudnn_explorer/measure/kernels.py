"""Which GPU kernels a call launches.

Two calls that launch the same kernels run the same implementation: this is how a
PyTorch convolution is matched to the legacy algorithm (or engine) behind it
(core.knobs.same_kernels).

Note [kernels from a graph] (csrc/graph_kernels.cpp): the call is captured into a CUDA
graph and the driver names the functions of its kernel nodes. That costs a capture (host
milliseconds), where the profiler's first session costs seconds in every process (6.2 s
on an H200 host). The profiler (CUDA activity) reads them where no graph can: a call that
cannot be captured, a torch without ``CUDAGraph(keep_graph=True)``, a driver without
``cuFuncGetName``. The extension's own timing reads them from the graph it captures
anyway (TimingOptions.kernels): :func:`distinct` turns those into the same answer.
"""
from __future__ import annotations

import warnings
from typing import Callable, Iterable, Optional, Tuple

__all__ = ["kernel_names", "distinct"]

# Kernels that are not part of the convolution itself (our own poison fill, copies).
_IGNORE = ("fill", "Memset", "Memcpy", "memset", "memcpy")


def distinct(names: Iterable[str]) -> Tuple[str, ...]:
    """Sorted distinct kernel names, without those of fills and copies."""
    return tuple(sorted({n for n in names if not any(s in n for s in _IGNORE)}))


def kernel_names(fn: Callable[[], object], repeats: int = 1) -> Tuple[str, ...]:
    """Sorted distinct names of the GPU kernels ``fn`` launches (after one warm-up call):
    from a CUDA graph of one call, else from the profiler over ``repeats`` calls."""
    fn()
    names = _from_graph(fn)
    return distinct(names) if names is not None else _from_profiler(fn, repeats)


def _from_graph(fn: Callable[[], object]) -> Optional[Tuple[str, ...]]:
    """The kernels of one call of ``fn`` captured into a CUDA graph (not replayed, so
    nothing runs and nothing needs a synchronisation), or None when it cannot be captured
    or the graph cannot be read."""
    import torch

    from . import native

    try:
        graph = torch.cuda.CUDAGraph(keep_graph=True)
        raw = graph.raw_cuda_graph
    except (TypeError, AttributeError):  # a torch without keep_graph / raw_cuda_graph
        return None
    stream = torch.cuda.current_stream()
    side = torch.cuda.Stream()
    side.wait_stream(stream)
    try:
        with torch.cuda.stream(side):
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                fn()
            finally:
                graph.capture_end()
        names = native.load().graph_kernel_names(raw())
    except Exception:  # noqa: BLE001 - any capture failure: the profiler answers instead
        names = None
    finally:
        stream.wait_stream(side)
        del graph
    return None if names is None else tuple(names)


def _from_profiler(fn: Callable[[], object], repeats: int) -> Tuple[str, ...]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()  # the warm-up call's kernels stay out of the profile
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle"
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(repeats):
                fn()
            torch.cuda.synchronize()
    return distinct(e.name for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA)
