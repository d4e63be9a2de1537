"""A whole step (gradients reset, forward, backward, and whatever else the step does)
captured as one CUDA graph, as PyTorch's whole-network capture makes it, for its replays
to be timed: the model command's steady step (model/mode_child.py) and the cold-start
benchmark's (benchmarks/cold_start.py)."""
from __future__ import annotations

import gc
from typing import Callable, Optional, Tuple

from ..core.errors import described

__all__ = ["capture_step"]


def capture_step(torch, step: Callable[[], object], zero_grad: Callable[[], object],
                 device: str) -> Tuple[Optional[Callable[[], None]], str]:
    """(replay, "") where ``step`` (with autocast's weight cache off, as a capture needs)
    is captured as a CUDA graph, ``replay`` running it again; (None, why) where it cannot
    be (a sync on the host, data-dependent shapes, ...). Warmed on a side stream first,
    ``zero_grad`` (gradients set to None) before each warm-up and before the capture, so
    that the graph owns the gradients and each replay writes them anew. The step's plans
    and picks must be made already (its first calls ran eagerly): the capture records
    the kernels the eager step runs.

    Note [failed capture]: a capture that fails leaves the process changed. The default
    CUDA generator stays marked as capturing (every later random number fails with
    "Offset increment outside graph capture"): its state is put back from a copy taken
    before. torch.cuda.graph ends the capture before it restores the caller's stream, so
    a failed end leaves the capture stream current: the outer stream context restores it.
    What else a failed capture leaves behind is not known (on the H200 the sizes after a
    failed one failed too, and memory grew until one ran out), so the model command's
    steady process stops after it (model/mode_runner.py). Python's garbage collector is
    held off during the capture: a collection there may run destructors that call CUDA
    (an event, an earlier graph), which a capture in PyTorch's global mode forbids."""
    generator = torch.cuda.default_generators[torch.device(device).index or 0]
    saved = generator.clone_state()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                zero_grad()
                step()
        torch.cuda.current_stream().wait_stream(side)
        zero_grad()
        graph = torch.cuda.CUDAGraph()
        gc.collect()
        gc.disable()
        try:
            with torch.cuda.stream(torch.cuda.current_stream()), torch.cuda.graph(graph):
                step()
        finally:
            gc.enable()
        graph.replay()
        torch.cuda.synchronize()
        return graph.replay, ""
    except Exception as e:  # noqa: BLE001  (any capture failure: the caller says why)
        torch.cuda.synchronize()
        generator.graphsafe_set_state(saved)
        return None, f"CUDA graph capture failed ({described(e, 200)})"
