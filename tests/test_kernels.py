"""Which kernels a call launches (measure/kernels.py, Note [kernels from a graph]), without
a GPU: the names a timing's graph gave are used as they are, fills and copies left out;
the profiler answers only where no graph could."""
from types import SimpleNamespace as NS

import pytest

from cudnn_explorer.core.options import TimingSpec
from cudnn_explorer.measure import kernels
from fakes import FakeOut, exploration

GRAPH_NAMES = ["conv_b", "void at::native::fill_kernel<float>()", "conv_a", "conv_b"]


def test_distinct_sorts_and_leaves_out_fills_and_copies():
    assert kernels.distinct(GRAPH_NAMES + ["Memcpy DtoD", "Memset (Device)"]) == (
        "conv_a", "conv_b")
    assert kernels.distinct([]) == ()


@pytest.fixture
def no_sync(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)


def test_kernel_names_asks_the_graph_first_and_the_profiler_only_without_one(monkeypatch,
                                                                              no_sync):
    calls = []
    monkeypatch.setattr(kernels, "_from_graph", lambda fn: tuple(GRAPH_NAMES))
    monkeypatch.setattr(kernels, "_from_profiler", lambda fn, r: pytest.fail("profiled"))
    assert kernels.kernel_names(lambda: calls.append(1)) == ("conv_a", "conv_b")
    assert calls == [1]  # the warm-up call; the capture is the graph reader's
    monkeypatch.setattr(kernels, "_from_graph", lambda fn: None)
    monkeypatch.setattr(kernels, "_from_profiler", lambda fn, r: ("from_profiler",))
    assert kernels.kernel_names(lambda: None) == ("from_profiler",)


def _result(read):
    timing = NS(per_launch_ms=[0.1] * 5, launches_per_sample=10, method="graph",
                warmup_launches=12, note="", eager_per_call_ms=[], eager_calls_per_sample=0,
                kernels=GRAPH_NAMES if read else [], kernels_read=read)
    return NS(status="OK", message="", name="eng1_k2=0", numeric_notes=[], behavior_notes=[],
              workspace_bytes=0, build_ms=0.5, timed=True, plan_index=0, timing=timing)


@pytest.mark.parametrize("read", [True, False])
def test_an_engine_config_takes_its_kernels_from_its_timing_graph(monkeypatch, read):
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import ConfigRun, DirectionData

    asked = []

    class Search:
        def build(self, e, knobs):
            return NS(**{**vars(_result(read)), "status": "built", "timed": False})

        def measure(self, built, timed, opt):
            asked.append(opt.kernels)
            return _result(read)

        def execute(self, i):
            pass

    monkeypatch.setattr(eng, "kernel_names", lambda fn: ("profiled_kernel",))
    data = DirectionData(exploration().problem, "fwd", None, {"y": FakeOut()}, None)
    cfg, _ = eng._run_config(Search(), data, 1, ((2, 0),), {},
                             ConfigRun(TimingSpec(budget_ms=1.0), kernels=True))
    assert asked == [True]  # the timing was asked to read them
    assert cfg.kernels == (["conv_a", "conv_b"] if read else ["profiled_kernel"])


def test_a_legacy_row_takes_its_kernels_from_its_timing_graph(monkeypatch):
    from cudnn_explorer.measure import legacy

    lab = legacy.LegacyLab.__new__(legacy.LegacyLab)
    lab.problem, lab.direction, lab.native, lab.ref = exploration().problem, "fwd", None, None
    lab.tensors, lab._kernels = {"y": FakeOut()}, {}
    asked = []

    def time_algorithm(d, p, algo, math, spec, kernels=False, cutoff_ms=0.0):
        asked.append(kernels)
        return _result(read=algo == 1).timing

    monkeypatch.setattr(legacy.native, "time_algorithm", time_algorithm)
    monkeypatch.setattr(legacy, "kernel_names", lambda fn: ("profiled_kernel",))
    for algo in (1, 2):
        lab.measure(algo, "DEFAULT_MATH", TimingSpec(budget_ms=1.0), check=False)
    assert asked == [True, True]
    assert lab.kernels(1, "DEFAULT_MATH") == ("conv_a", "conv_b")
    assert lab.kernels(2, "DEFAULT_MATH") == ("profiled_kernel",)  # no graph named them
