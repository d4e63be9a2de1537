"""Engine configs, pure parts: knob spaces, sampling, tags, PyTorch's rules, summaries."""

import pytest

from cudnn_explorer.core import knobs
from cudnn_explorer.report import engines
from cudnn_explorer.core.logs import parse_tag
from cudnn_explorer.core.records import EngineConfig, EngineSpace, PyTorchPick
from cudnn_explorer.core.exploration import Exploration

from fakes import exploration, timing


def test_knob_values_and_space():
    assert knobs.knob_values([2, 0, 6, 2]) == [0, 2, 4, 6]
    assert knobs.knob_values([5, 3, 3, 0]) == [3]
    assert knobs.space_size([[2, 0, 5, 1], [18, 0, 1, 1]]) == 12
    assert knobs.space_size([]) == 1


def test_candidates_take_everything_when_small_default_first():
    got = knobs.candidate_configs([[2, 0, 1, 1], [5, 0, 2, 1]], 16)
    assert got[0] == ()  # the engine's default config (no knob set)
    assert len(got) == 7 and len(set(got)) == 7
    assert knobs.candidate_configs([], 4) == [()]


def test_candidates_are_bounded_deterministic_and_prefer_listed_configs():
    space = [[2, 0, 19, 1], [13, 0, 1, 1], [27, 0, 8, 1], [28, 1, 8, 1]]
    pref = [((28, 1), (2, 4), (13, 0), (27, 4))]
    a = knobs.candidate_configs(space, 40, pref)
    assert a == knobs.candidate_configs(space, 40, pref)
    assert len(a) == 40 and len(set(a)) == 40
    assert a[0] == ((2, 4), (13, 0), (27, 4), (28, 1))  # the listed config first, sorted
    assert a[1] == ()
    for c in a[2:]:
        assert [t for t, _ in c] == [2, 13, 27, 28]
    # evenly spaced: the first knob (slowest in the enumeration) takes many values
    assert len({dict(c)[2] for c in a[2:]}) >= 15
    small = knobs.candidate_configs([[2, 0, 5, 1], [18, 0, 1, 1]], 4, [((2, 4), (18, 0))])
    assert len(small) == 4


def test_config_tags_match_pytorch_format():
    tag = knobs.config_tag("fwd", 46, ((14, 3), (2, 4), (5, 2)))
    assert tag == "ConvFwd_eng46_k2=4_k5=2_k14=3"
    assert str(parse_tag(tag)) == tag
    assert knobs.config_tag("bwd-filter", 1, ()) == "ConvBwdFilter_eng1"


def test_pytorch_rules():
    assert not knobs.allowed_by_pytorch(["TENSOR_CORE"], "float32", False)
    assert knobs.allowed_by_pytorch(["TENSOR_CORE"], "float32", True)
    assert knobs.allowed_by_pytorch(["TENSOR_CORE"], "float16", None)
    assert not knobs.allowed_by_pytorch(["NONDETERMINISTIC"], "float16", None, True)


def _space():
    def cfg(tag, t, ok=True, notes=()):
        c = EngineConfig(tag=tag, engine=parse_tag(tag).engine, status="OK" if ok else
                         "build failed", numeric_notes=list(notes), workspace_bytes=0)
        if t is not None:
            c.timing, c.max_error, c.tolerance, c.output_finite = timing(t), 1e-4, 1e-2, True
        return c
    sp = EngineSpace(engine_count=3, max_per_engine=8, attempts_per_engine=128, engines=[
        {"engine": 1, "tried": 1, "rejected": 0, "configs": 1},
        {"engine": 46, "tried": 9, "rejected": 8, "configs": 1},
        {"engine": 70, "tried": 3, "rejected": 2, "configs": 1}], configs=[
        cfg("ConvFwd_eng70_k2=4_k18=0", 0.30), cfg("ConvFwd_eng46_k2=4_k5=2_k14=3", 0.25,
                                                    notes=["TENSOR_CORE"]),
        cfg("ConvFwd_eng1", None, ok=False)],
        legacy_map={"IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)": ["ConvFwd_eng70_k2=4_k18=0"]})
    return sp


def _explored(**pick):
    """An exploration whose first direction has _space(), a legacy row at 0.21 ms and
    PyTorch's benchmark pick ConvFwd_eng70_k2=4_k18=0 at 0.31 ms."""
    e = exploration()
    d = e.directions[0]
    d.engines = _space()
    d.find[0].timing = timing(0.21)
    d.pytorch = [PyTorchPick(label="benchmark", mode="benchmark", api="engine",
                             benchmark_limit=10, steady=timing(0.31),
                             engine_tag="ConvFwd_eng70_k2=4_k18=0", **pick)]
    return e, d


def test_summary_locates_pytorch_pick_and_what_it_missed():
    e, d = _explored(candidates=[{"tag": "ConvFwd_eng70_k2=4_k18=0"},
                                 {"tag": "ConvFwd_eng46_k2=4_k5=2_k14=3"}],
                     timed=[["ConvFwd_eng70_k2=4_k18=0", 0.3]])
    rtc = d.engines.configs[0]
    rtc.behavior_notes, rtc.build_ms = ["RUNTIME_COMPILATION"], 356.3
    lines = engines.summary_lines(d)
    text = "\n".join(lines)
    assert ("run-time compiled configs: 1, building their plans took 0.4 s in all (slowest "
            "ConvFwd_eng70_k2=4_k18=0, 356 ms)") in text
    assert ("3 of 3 engines accept this problem; 13 knob configs tried (at most 128 per "
            "engine), 10 rejected by cuDNN as invalid, 3 valid (at most 8 per engine), 2 built "
            "and ran") in text
    assert "best engine config: ConvFwd_eng46_k2=4_k5=2_k14=3 [TENSOR_CORE] 0.2500 ms" in text
    assert "found in our list, re-timed 0.3000 ms vs PyTorch's own 0.3100 ms" in text
    assert "PyTorch missed ConvFwd_eng46_k2=4_k5=2_k14=3 (a candidate cut by benchmark_limit)" \
        in text
    assert "legacy IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH) runs the kernels of " \
           "ConvFwd_eng70_k2=4_k18=0" in text
    back = Exploration.from_json(e.to_json())
    assert back.directions[0].engines == d.engines


def test_engine_table_renders_from_json_without_gpu():
    from cudnn_explorer.report.tables import render_exploration

    e = exploration()
    e.directions[0].engines = _space()
    text = render_exploration(Exploration.from_json(e.to_json()), show_engines=True)
    assert "engine configs (3;" in text and "ConvFwd_eng46_k2=4_k5=2_k14=3" in text
    assert "build failed" in text
    assert "engine configs (3;" not in render_exploration(e)  # summary only by default


def test_output_ends_with_a_summary_table_per_direction():
    from cudnn_explorer.report.tables import render_exploration

    e, d = _explored()
    table = engines.summary_table(e).splitlines()
    assert table[0].split()[:3] == ["direction", "who", "what"]
    legacy, engine, pytorch = table[2:5]
    assert legacy.startswith("fwd") and "best legacy algorithm" in legacy
    assert legacy.rstrip().endswith("fastest")
    assert "eng46_k2=4_k5=2_k14=3" in engine and "0.2500" in engine and engine.endswith("+19%")
    assert "eng70_k2=4_k18=0" in pytorch and "0.3100" in pytorch and pytorch.endswith("+48%")
    text = render_exploration(e)
    tail = text[text.index("== summary"):]
    assert "eng46_k2=4_k5=2_k14=3" in tail and "one timing method for all (graph)" in tail
    d.engines.budget_exhausted, d.engines.wall_s = True, 41.6
    assert "best engine config (budget cut)" in engines.summary_table(e)
    assert "; time budget exhausted, the rest skipped; explored in 42 s" in "\n".join(
        engines.summary_lines(d))
    d.engines = None
    assert "== summary" not in render_exploration(e)


def test_vs_fastest_calls_a_difference_within_noise_a_tie():
    assert engines.vs_fastest(0.3264, 0.3264, True) == "fastest (tie within 3%)"
    assert engines.vs_fastest(0.3321, 0.3264, True) == "+2%"
    assert engines.vs_fastest(0.30, 0.30, False) == "fastest"
    assert engines.vs_fastest(None, 0.3, False) == "-"


def test_summary_with_benchmark_limit_zero_finds_the_pick():
    """The pick at the requested limit is the first benchmark run, whatever its limit."""
    e, d = _explored()
    d.pytorch[0].benchmark_limit = 0
    d.pytorch[0].label = "benchmark, limit 0"
    assert "PyTorch's benchmark pick" in engines.summary_table(e)
    assert d.full_search_pick() is None


def test_legacy_configs_are_searched_before_the_knob_space_is_sampled(monkeypatch):
    """A legacy algorithm's config (same kernels) is looked for among the engines that ran
    its kernel family right after the listed configs, before sampling other engines, so
    a time budget cuts the sampling first."""
    from types import SimpleNamespace as NS

    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings
    from fakes import FakeOut, exploration

    kernels = {"eng1_k2=0": "conv_tilesize128x64", "eng1_k2=3": "conv_tilesize256x128"}
    order, built = [], []

    class Search:
        def engine_count(self):
            return 2

        def engine_info(self, e):
            return NS(engine=e, status="OK", knobs=[NS(type=2, min_value=0, max_value=3,
                                                       stride=1)])

        def heuristics(self, mode):
            return ["eng1_k2=0"] if mode == "A" else []

        def build(self, e, knobs):
            name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
            order.append(name)
            built.append(name)
            return NS(status="built", message="", name=name, numeric_notes=[],
                      behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                      plan_index=len(built) - 1, timing=None)

        def measure(self, b, timed, opt):
            return NS(**{**vars(b), "status": "OK"})

        def execute(self, i):
            self.last = built[i]

    search = Search()
    monkeypatch.setattr(eng, "kernel_names", lambda fn: (
        fn(), (kernels.get(search.last, "other_kernel"),))[1])
    legacy = exploration().directions[0].find[0]
    legacy.kernels = ["conv_tilesize256x128"]
    sp = eng.explore_engines(
        DirectionData(exploration().problem, "fwd", None,
                      {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
        SearchSettings(legacy_rows=[legacy], max_per_engine=4, time_budget_s=None,
                       timing=TimingSpec(retime=False), kernels=True),
        prepared=eng.PreparedSearch(search))
    found = order.index("eng1_k2=3")
    assert order[0] == "eng1_k2=0"
    assert all(not n.startswith("eng0") for n in order[:found]), order
    assert sp.legacy_map == {f"{legacy.algo_name} ({legacy.math_type})": ["ConvFwd_eng1_k2=3"]}


def test_a_retiming_of_given_plans_times_those_plans_and_no_listed_config():
    """only_preferred (bench_search's re-timing of two searches' choices): the preferred
    tags are built and timed, and the configs cuDNN's heuristics list are not."""
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings
    from fakes import FakeOut, FakeSearch, exploration

    def built(only):
        seen = []
        sp = eng.explore_engines(
            DirectionData(exploration().problem, "fwd", None,
                          {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
            SearchSettings(time_budget_s=None, timing=TimingSpec(budget_ms=1.0),
                           kernels=False, preferred_tags=["ConvFwd_eng0"], sample=False,
                           only_preferred=only),
            prepared=eng.PreparedSearch(FakeSearch(seen)))
        return [c.tag for c in sp.configs], {name for name, *_ in seen}

    tags, timed = built(True)
    assert tags == ["ConvFwd_eng0"] and timed == {"eng0"}
    tags, timed = built(False)  # the default: the heuristics' eng1_k2=1 too
    assert tags == ["ConvFwd_eng0", "ConvFwd_eng1_k2=1"] and timed == {"eng0", "eng1_k2=1"}


@pytest.mark.parametrize("sample,modes", [(True, ["A", "B", "FALLBACK"]),
                                          (False, ["A", "FALLBACK"])])
def test_without_sampling_only_the_modes_pytorch_lists_from_are_queried(sample, modes):
    """A model sweep's search (no sampling) lists what PyTorch's generator lists, modes A
    and FALLBACK; mode B, which would only rank configs in the table, costs a query per
    direction and is not asked."""
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings
    from fakes import FakeOut, FakeSearch, exploration

    asked = []

    class Asking(FakeSearch):
        def heuristics(self, mode):
            asked.append(mode)
            return super().heuristics(mode)

    eng.explore_engines(
        DirectionData(exploration().problem, "fwd", None,
                      {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
        SearchSettings(time_budget_s=None, timing=TimingSpec(budget_ms=1.0), kernels=False,
                       sample=sample),
        prepared=eng.PreparedSearch(Asking([])))
    assert asked == modes


def test_known_hangs_name_their_versions_gpu_directions_and_knob_values():
    """Note [known hangs]: a rule covers the engine, direction, knob values, cuDNN
    versions and GPU it was seen on, and nothing else."""
    from cudnn_explorer.core.hangs import known_hang

    h200 = (9, 0)
    assert "engine 77" in known_hang("bwd-data", 77, ((17, 3), (24, 0)), 91900, h200)
    assert "thorough" in known_hang("bwd-filter", 69, ((17, 7), (24, 2)), 91903, h200)
    assert known_hang("bwd-data", 77, ((17, 10), (24, 3)), 91900, h200)
    for case in [("bwd-data", 77, ((17, 4), (24, 1)), 91900, h200),  # powers of two ran
                 ("bwd-data", 77, ((17, 1), (24, 0)), 91900, h200),
                 ("bwd-data", 77, ((17, 8), (24, 2)), 91900, h200),
                 ("bwd-filter", 77, ((17, 3),), 91900, h200),        # 77 is bwd-data's
                 ("fwd", 69, ((17, 3),), 91900, h200),
                 ("bwd-data", 77, ((17, 3),), 92000, h200),          # another cuDNN
                 ("bwd-data", 77, ((17, 3),), 91800, h200),
                 ("bwd-data", 77, ((17, 3),), 91900, (10, 0)),       # another GPU
                 ("bwd-data", 77, (), 91900, h200)]:
        assert known_hang(*case) is None, case


def Knob17Search(seen, max_value, listed=()):
    """fakes.FakeSearch whose engine 1 has knob 17 in 1..max_value (the knob of the
    configs known to hang) and mode A lists ``listed``."""
    from types import SimpleNamespace as NS

    from fakes import FakeSearch

    class Search(FakeSearch):
        def engine_info(self, e):
            knobs = [NS(type=17, min_value=1, max_value=max_value, stride=1)] if e == 1 else []
            return NS(engine=e, status="OK", knobs=knobs)

        def heuristics(self, mode):
            return list(listed) if mode == "A" else []

    return Search(seen)


@pytest.mark.parametrize("staged", [False, True])
def test_a_config_known_to_hang_is_recorded_skipped_not_built(staged):
    """The sampling passes over a config known_hang names: it is never built or launched,
    it is recorded with status "skipped" and the reason, it takes no place among an
    engine's configs, and a restarted worker (prior) keeps it skipped."""
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings, Supervision
    from fakes import FakeOut, exploration

    def hang(e, ch):
        return "known to hang (test)" if e == 1 and dict(ch).get(17) in (3, 5) else None

    def explored(prior=None, events=None):
        seen = []
        sp = eng.explore_engines(
            DirectionData(exploration().problem, "fwd", None,
                          {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
            SearchSettings(time_budget_s=None, max_per_engine=8,
                           timing=TimingSpec(budget_ms=1.0), kernels=False, staged=staged),
            Supervision(known_hang=hang, prior=prior,
                        on_event=(events.append if events is not None else None)),
            eng.PreparedSearch(Knob17Search(seen, 7, ["eng1_k17=1"])))
        return sp, {name for name, *_ in seen}

    events = []
    sp, built = explored(events=events)
    skipped = [c for c in sp.configs if c.status == eng.SKIPPED]
    assert sorted(c.tag for c in skipped) == ["ConvFwd_eng1_k17=3", "ConvFwd_eng1_k17=5"]
    assert all(c.message == "known to hang (test)" and c.timing is None for c in skipped)
    assert not built & {"eng1_k17=3", "eng1_k17=5"}
    assert {"eng1_k17=1", "eng1_k17=2", "eng1_k17=4", "eng1_k17=7"} <= built
    assert sp.engines[1]["skipped"] == 2
    assert sp.engines[1]["configs"] == len({b for b in built if b.startswith("eng1")}) == 6
    assert sp.best() is not None and sp.best().status == "OK"
    # a restart: what the first worker did comes back as prior, the skipped ones too
    prior = {"attempts": [ev["attempt"] for ev in events if "attempt" in ev], "failed": []}
    again, rebuilt = explored(prior)
    assert not rebuilt & {"eng1_k17=3", "eng1_k17=5"}
    assert sorted(c.tag for c in again.configs if c.status == eng.SKIPPED) == \
        ["ConvFwd_eng1_k17=3", "ConvFwd_eng1_k17=5"] and again.engines[1]["skipped"] == 2


def _rejecting_knob17_search(measured, builds, rejects):
    """Knob17Search (knob 17 in 1..7, nothing listed for engine 1) whose builds of engine
    1's configs are recorded in ``builds`` and rejected where ``rejects(knob 17's value or
    None)`` says so, as cuDNN rejects a config its engine cannot run on the problem."""
    from types import SimpleNamespace as NS

    class Search(type(Knob17Search(measured, 7))):
        def build(self, e, knobs):
            made = super().build(e, knobs)
            if e != 1:
                return made
            builds.append(made.name)
            if rejects(dict(map(tuple, knobs)).get(17)):
                return NS(**{**vars(made), "status": "config rejected"})
            return made

    return Search(measured)


def _explored_with_hangs(search, hang):
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings, Supervision
    from fakes import FakeOut, exploration

    return eng.explore_engines(
        DirectionData(exploration().problem, "fwd", None,
                      {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, None),
        SearchSettings(time_budget_s=None, max_per_engine=8,
                       timing=TimingSpec(budget_ms=1.0), kernels=False, staged=True),
        Supervision(known_hang=hang), eng.PreparedSearch(search))


def _hang_3_or_5(e, ch):
    return "known to hang (test)" if e == 1 and dict(ch).get(17) in (3, 5) else None


def test_known_hangs_of_an_engine_that_accepts_none_are_rejected_not_skipped():
    """Note [hangs of engines that accept]: where cuDNN rejects every config of the engine
    (on an H100, engine 77 for the default float32 problem), a config the rule names is
    built, which launches nothing, and counted as rejected, as the thorough profile
    counts it: not listed as skipped, "known to hang", nor counted as valid."""
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.report.engines import summary_lines

    measured, builds = [], []
    sp = _explored_with_hangs(_rejecting_knob17_search(measured, builds, lambda v: True),
                              _hang_3_or_5)
    assert not [c for c in sp.configs if c.status == eng.SKIPPED]
    assert {"eng1_k17=3", "eng1_k17=5"} <= set(builds)
    assert not [m for m in measured if m[0].startswith("eng1")]
    e1 = sp.engines[1]
    assert (e1["tried"], e1["rejected"], e1["configs"], e1.get("skipped", 0)) == (8, 8, 0, 0)
    line = summary_lines(fakes_direction(sp))[0]
    assert "known to hang" not in line and f"{len(sp.configs)} valid" in line


def test_the_first_known_hang_an_engine_builds_is_skipped_unlaunched_the_rest_unbuilt():
    """Once cuDNN builds a config of the engine (here the first it accepts is one the rule
    names), that config and the engine's later ones the rule names are skipped: the first
    built but never launched, the later ones not even built; the others run as before,
    and the summary counts the skipped ones apart from the valid ones."""
    from cudnn_explorer.measure import engines as eng
    from cudnn_explorer.report.engines import summary_lines

    measured, builds = [], []
    search = _rejecting_knob17_search(measured, builds, lambda v: v in (None, 1, 2))
    sp = _explored_with_hangs(search, _hang_3_or_5)
    assert sorted(c.tag for c in sp.configs if c.status == eng.SKIPPED) == \
        ["ConvFwd_eng1_k17=3", "ConvFwd_eng1_k17=5"]
    assert "eng1_k17=3" in builds and "eng1_k17=5" not in builds
    ran = {m[0] for m in measured if m[0].startswith("eng1")}
    assert ran == {"eng1_k17=4", "eng1_k17=6", "eng1_k17=7"}
    e1 = sp.engines[1]
    assert (e1["rejected"], e1["configs"], e1["skipped"]) == (3, 3, 2)
    assert e1["untried"] == 0
    line = summary_lines(fakes_direction(sp))[0]
    assert f"{len(sp.configs) - 2} valid" in line and "2 known to hang not tried" in line


def fakes_direction(space):
    """A direction of fakes' exploration with engine space ``space``."""
    import dataclasses

    from fakes import fwd_result

    return dataclasses.replace(fwd_result(), engines=space)


@pytest.mark.parametrize("hold,staged", [(False, True), (True, True), (True, False)])
def test_the_worker_passes_the_hang_rule_to_a_held_job_too(hold, staged):
    """engine_serve.run gives a staged search the rule of configs known to hang, also a
    held job (Note [engine search ahead]), which makes its own search before it times:
    on the H200 such a job tried eng77_k17=3 when the rule was read only without one.
    A search that is not staged (the thorough profile) tries every config, a known one's
    launches under the shorter limit its stage events name."""
    from dataclasses import asdict

    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import engine_serve, engines as eng
    from fakes import FakeOut, exploration

    seen, asked = [], []

    def hangs(direction, device):
        asked.append((direction, device))
        return lambda e, ch: "known (test)" if e == 1 and dict(ch).get(17) == 3 else None

    spec = {"problem": exploration().problem.to_dict(), "direction": "fwd", "device": 0,
            "timing": asdict(TimingSpec(budget_ms=1.0)), "staged": staged, "sample": True,
            "hold": hold, "time_budget_s": None}
    events = []
    space = engine_serve.run(
        spec, events.append, setup=lambda *a: (None, {"x": FakeOut(), "w": FakeOut(),
                                                        "y": FakeOut()}, None),
        search=Knob17Search(seen, 6, ["eng1_k2=1"]), go=(lambda: {}) if hold else None, hangs=hangs)
    known = [ev for ev in events if ev.get("known_hang")]
    if not staged:
        assert asked == [("fwd", 0)]
        assert not [c for c in space.configs if c.status == eng.SKIPPED]
        assert "eng1_k17=3" in {name for name, *_ in seen}
        assert known and all(ev["known_hang"] == "known (test)" for ev in known)
        assert "running" in {ev["stage"] for ev in known}
        return
    assert not known
    assert asked == [("fwd", 0)]
    assert [c.tag for c in space.configs if c.status == eng.SKIPPED] == ["ConvFwd_eng1_k17=3"]
    assert "eng1_k17=3" not in {name for name, *_ in seen}
