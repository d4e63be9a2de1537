"""measure/step_graph.py's capture of a whole step, with a stand-in for torch.cuda: the
order PyTorch's whole-network capture needs, and what a failed capture puts back."""
import gc
from types import SimpleNamespace

from cudnn_explorer.measure.step_graph import capture_step


class _Context:
    def __init__(self, log, name, fail_on_exit=None):
        self.log, self.name, self.fail = log, name, fail_on_exit

    def __enter__(self):
        self.log.append(f"enter {self.name}")

    def __exit__(self, *exc):
        self.log.append(f"exit {self.name}")
        if self.fail and exc[0] is None:
            raise RuntimeError(self.fail)


def _torch(log, capture_fails=None):
    """A torch whose cuda records what is done to it; ``capture_fails``: the capture's end
    raises that."""
    generator = SimpleNamespace(clone_state=lambda: "state",
                                graphsafe_set_state=lambda s: log.append(f"generator {s}"))

    class Graph:
        def replay(self):
            log.append("replay")

    class Stream:
        def wait_stream(self, other):
            pass

    current = Stream()
    cuda = SimpleNamespace(
        default_generators=[generator], Stream=Stream, CUDAGraph=Graph,
        current_stream=lambda: current,
        stream=lambda s: _Context(log, "stream" if s is current else "side stream"),
        graph=lambda g: _Context(log, "graph", capture_fails),
        synchronize=lambda: log.append("synchronize"))
    return SimpleNamespace(cuda=cuda, device=lambda d: SimpleNamespace(index=0))


def test_a_step_is_warmed_on_a_side_stream_then_captured_once_with_fresh_gradients():
    log = []

    def step():
        log.append("step in graph, gc off" if log[-1:] == ["enter graph"] and
                   not gc.isenabled() else "step")

    replay, why = capture_step(_torch(log), step, lambda: log.append("zero"), "cuda:0")
    assert why == "" and gc.isenabled()
    assert log == ["enter side stream", "zero", "step", "zero", "step", "exit side stream",
                   "zero", "enter stream", "enter graph", "step in graph, gc off",
                   "exit graph", "exit stream", "replay", "synchronize"]
    replay()
    assert log[-1] == "replay"  # no gradients reset after the capture: a replay owns them


def test_a_failed_capture_puts_the_generator_back_and_says_why():
    log = []
    replay, why = capture_step(_torch(log, capture_fails="operation not permitted when "
                                                           "stream is capturing"),
                               lambda: None, lambda: None, "cuda")
    assert replay is None and gc.isenabled()
    assert why.startswith("CUDA graph capture failed (") and "not permitted" in why
    assert log[-2:] == ["synchronize", "generator state"]
