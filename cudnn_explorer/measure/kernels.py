"""Which GPU kernels a call launches, read with torch.profiler (CUDA activity).

Two calls that launch the same kernels run the same implementation: this is how a
PyTorch convolution is matched to the legacy algorithm (or engine) behind it
(core.knobs.same_kernels).
"""
from __future__ import annotations

import warnings
from typing import Callable, List, Optional, Sequence, Tuple

__all__ = ["kernel_names", "kernel_names_each"]

# Kernels that are not part of the convolution itself (our own poison fill, copies).
_IGNORE = ("fill", "Memset", "Memcpy", "memset", "memcpy")
# The kernel torch.cuda._sleep launches: kernel_names_each's separator between calls.
_SEPARATOR = "spin_kernel"


def _cuda_events(run: Callable[[], None]):
    """The CUDA kernel events of ``run()``, in the order the GPU started them."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle"
        warnings.simplefilter("ignore", UserWarning)
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return sorted(events, key=lambda e: e.time_range.start)


def _kept(name: str) -> bool:
    return not any(s in name for s in _IGNORE)


def kernel_names(fn: Callable[[], object], repeats: int = 1) -> Tuple[str, ...]:
    """Sorted distinct names of the GPU kernels ``fn`` launches (after one warm-up call)."""
    import torch

    fn()
    torch.cuda.synchronize()

    def run():
        for _ in range(repeats):
            fn()

    return tuple(sorted({e.name for e in _cuda_events(run) if _kept(e.name)}))


def kernel_names_each(fns: Sequence[Callable[[], object]]) -> List[Optional[Tuple[str, ...]]]:
    """kernel_names of every call in ``fns`` from one profiler session (starting one costs
    far more than the calls): each call runs once to warm up, then once more, in order,
    after a separator kernel and followed by a synchronisation, so the kernels between two
    separators are that call's. A call that raises gets None; so do all of them when the
    separators cannot be told apart (then use kernel_names one call at a time)."""
    import torch

    ok = []
    for fn in fns:
        try:
            fn()
            ok.append(True)
        except Exception:  # noqa: BLE001 - that call's names are unknown, the rest go on
            ok.append(False)
    torch.cuda.synchronize()

    def run():
        for i, fn in enumerate(fns):
            torch.cuda._sleep(1)
            if ok[i]:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - as above
                    ok[i] = False
            torch.cuda.synchronize()

    groups: List[set] = []
    for e in _cuda_events(run):
        if _SEPARATOR in e.name:
            groups.append(set())
        elif groups and _kept(e.name):
            groups[-1].add(e.name)
    if len(groups) != len(fns):
        return [None] * len(fns)
    return [tuple(sorted(g)) if good else None for g, good in zip(groups, ok)]
