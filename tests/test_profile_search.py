"""scripts/profile_search.py without a GPU: the native calls' host time summed by name,
and the GPU time a timing record's launches took."""
import pytest

import fakes
from conftest import load_script


def test_native_calls_are_timed_by_name_and_pass_through():
    mod = load_script("profile_search")

    class Search:
        engine_count = 3

        def build(self, engine, knobs):
            return ("built", engine, knobs)

        def measure(self, res):
            raise RuntimeError("bad plan")

    s = mod.TimedCalls(Search())
    assert s.build(1, [[2, 3]]) == ("built", 1, [[2, 3]]) and s.engine_count == 3
    with pytest.raises(RuntimeError):
        s.measure(None)  # a call that raises is timed too
    assert dict(s.calls) == {"build": 1, "measure": 1}
    assert set(s.seconds) == {"build", "measure"} and min(s.seconds.values()) >= 0


def test_the_heuristics_are_timed_by_mode():
    mod = load_script("profile_search")

    class Search:
        def heuristics(self, mode):
            return [mode]

    s = mod.TimedCalls(Search())
    assert s.heuristics("A") == ["A"] and s.heuristics("B") == ["B"] and s.heuristics("A")
    assert dict(s.calls) == {"heuristics A": 2, "heuristics B": 1}


def test_gpu_time_of_a_timing_record():
    mod = load_script("profile_search")
    t = fakes.timing(0.5)  # 0.5 ms per launch
    own = 0.5 * (t.samples * t.launches_per_sample + t.warmup_launches)
    assert mod.gpu_ms(t) == pytest.approx(own) and mod.gpu_ms(None) == 0.0
    with_loop = fakes.timing(0.5, eager=0.6)  # and an eager loop of 0.6 ms per call
    assert mod.gpu_ms(with_loop) == pytest.approx(own + mod.gpu_ms(with_loop.eager))
    assert mod.gpu_ms(with_loop.eager) == pytest.approx(0.6 * 50 * 10)


def test_the_legacy_rows_are_profiled_as_a_sweep_measures_them(monkeypatch):
    """--legacy without a GPU: the lab's setup apart, its calls timed by name, the rows'
    launches estimated, and the rounds they left in counted."""
    import cProfile
    from types import SimpleNamespace as NS

    import cudnn_explorer as ce
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure import legacy, pipeline

    mod = load_script("profile_search")
    calls = []
    monkeypatch.setattr(legacy, "LegacyLab", lambda p, d, o: fakes.FakeLab(p, d, o, calls))
    monkeypatch.setattr(pipeline, "environment", lambda device=0: NS(gpu_name="NVIDIA H200"))
    opts = ExploreOptions.create().profiled("quick", model=True)
    out = mod.profile_legacy(ce.ConvProblem.create("32,3,224,224", kernel=3), "fwd", opts,
                             cProfile.Profile())
    assert out["rows"] >= 2 and out["setup_s"] >= 0
    assert set(out["native_calls"]) >= {"find", "measure"}
    assert out["native_calls"]["find"] == 1
    assert out["wall_ms_per_item"] is not None
    assert out["gpu_s_estimated"] > 0
    assert all(r["left"] >= 1 for r in out["rounds"])


def test_a_round_line_says_only_what_was_recorded():
    mod = load_script("profile_search")
    assert mod.round_line({"round": 1, "timed": 44, "left": 41, "wall_s": 0.4977}) == \
        "  round 1: 44 timed, 41 left, 0.498 s"
    assert mod.round_line({"round": 2, "timed": None, "left": 3}) == "  round 2: 3 left"
