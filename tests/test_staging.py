"""The staged search (Note [staged search] in cudnn_explorer/core/staging.py) on fake
timings, without a GPU: which candidates stay, and explore_engines' rounds over a fake
EngineSearch (ties, noise, a WRONG candidate, PyTorch's pick, an exhausted budget)."""
import dataclasses
from types import SimpleNamespace as NS

import pytest

from cudnn_explorer.core.options import TimingSpec
from cudnn_explorer.core.staging import (CUT_FLOOR_MS, FINAL_WARMUP_MS, ROUNDS, Timed, cutoff_ms,
                                         survivors)
from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings, Supervision
from fakes import FakeOut, exploration

FULL = TimingSpec(budget_ms=25.0)


def test_survivors_keep_ties_noise_and_the_named_ones():
    times = {"best": Timed(1.0), "tie": Timed(1.0), "near": Timed(1.29), "far": Timed(2.0),
             "noisy": Timed(1.6, spread=0.2), "named": Timed(5.0)}
    stay, left = survivors(times, 1.30, always=["named"])
    assert stay == ["best", "tie", "near", "noisy", "named"]  # in the order given
    assert left == {"far": pytest.approx(2.0)}
    assert survivors({}, 1.3) == ([], {})
    # the fast end of its noise decides: 1.6 x (1 - 2 x 0.05) = 1.44 > 1.3
    assert survivors({"a": Timed(1.0), "b": Timed(1.6, 0.05)}, 1.3)[1] == {
        "b": pytest.approx(1.6)}


class Search:
    """One engine whose knob k2 = 0..5 picks a config of the given time (ms); round
    budgets are recorded, so a test sees which config was timed in which round."""

    def __init__(self, times, spreads=None):
        self.times, self.spreads = times, spreads or {}
        self.names, self.timed, self.cutoffs, self.last = [], [], [], None

    def engine_count(self):
        return 1

    def engine_info(self, e):
        return NS(engine=e, status="OK", knobs=[NS(type=2, min_value=0,
                                                   max_value=len(self.times) - 1, stride=1)])

    def heuristics(self, mode):
        return ["eng0_k2=0"] if mode == "A" else []

    def build(self, e, knobs):
        name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
        if not knobs:  # the engine's default: not one of the configs here
            return NS(status="config rejected", message="", name="", numeric_notes=[],
                      behavior_notes=[], workspace_bytes=-1, build_ms=0.0, timed=False,
                      plan_index=-1, timing=None)
        self.names.append(name)
        return NS(status="built", message="", name=name, numeric_notes=[], behavior_notes=[],
                  workspace_bytes=0, build_ms=0.5, timed=False,
                  plan_index=len(self.names) - 1, timing=None)

    def measure(self, built, timed, opt):
        k = int(built.name.rsplit("=", 1)[1])
        # a noisy config is noisy in the brief first round only
        t = self.times[k]
        s = self.spreads.get(k, 0.0) if opt.budget_ms <= ROUNDS[0].budget_ms else 0.0
        self.timed.append((built.name, opt.budget_ms))
        self.samples = getattr(self, "samples", []) + [(opt.budget_ms, opt.sample_target_ms)]
        self.warmups = getattr(self, "warmups", []) + [
            (opt.budget_ms, opt.warmup_ms, opt.eager_budget_ms)]
        self.cutoffs.append((built.name, opt.cutoff_ms))
        self.last = built.name
        if 0 < opt.cutoff_ms < t * (1 - s):  # as csrc/timing.cpp: two launches, cut
            native = NS(per_launch_ms=[t], launches_per_sample=1,
                        method="cut", warmup_launches=1, note="", eager_per_call_ms=[],
                        eager_calls_per_sample=0, kernels=[], kernels_read=False)
        else:
            per = [t * (1 - s), t * (1 - s), t, t * (1 + s), t * (1 + s)]
            native = NS(per_launch_ms=per, launches_per_sample=10, method="graph",
                        warmup_launches=12, note="", eager_per_call_ms=[],
                        eager_calls_per_sample=0, kernels=[], kernels_read=False)
        return NS(**{**vars(built), "status": "OK", "timed": timed, "timing": native})


def explore(search, monkeypatch, wrong=(), finalists=None, budget_s=None, staged=True,
            check_s=0.0):
    """(the EngineSpace, [(config, its timing's budget) of each check]); a check takes
    ``check_s`` seconds."""
    import time

    from cudnn_explorer.measure import engines as eng

    checked = []

    def check(problem, out, ref, math_type):
        checked.append((search.last, search.timed[-1][1]))  # (config, its timing's budget)
        time.sleep(check_s)
        bad = search.last in wrong
        return NS(max_error=1.0 if bad else 1e-4, tolerance=1e-2, output_finite=True)

    monkeypatch.setattr(eng, "check_output", check)
    sp = eng.explore_engines(
        DirectionData(exploration().problem, "fwd", None,
                      {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, ref=object()),
        SearchSettings(max_per_engine=16, time_budget_s=budget_s, timing=FULL, kernels=False,
                       staged=staged, preferred_tags=finalists or (),
                       finalist_tags=finalists),
        prepared=eng.PreparedSearch(search))
    return sp, checked


def by_tag(sp):
    return {c.tag.split("_", 1)[1]: c for c in sp.configs}


def test_rounds_time_every_config_briefly_and_only_the_finalists_in_full(monkeypatch):
    #            k2=0 (heuristic A's first)  1      2      3      4      5
    search = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    sp, checked = explore(search, monkeypatch)
    c = by_tag(sp)
    r1, r2 = ROUNDS[0].budget_ms, ROUNDS[1].budget_ms
    first = [n for n, b in search.timed if b == r1]
    assert sorted(first) == sorted(f"eng0_k2={k}" for k in range(6))  # every one, briefly
    # round 1: more than 1.3x behind the best leaves (2 and 3x), but heuristic A's first
    assert c["eng0_k2=5"].left_round == 1 and c["eng0_k2=5"].left_ratio == pytest.approx(3.0)
    assert c["eng0_k2=4"].left_round == 1
    assert c["eng0_k2=0"].left_round is None  # 1.5x, but heuristic mode A's first
    # round 2 at its budget: 1.2x leaves (more than 1.08x behind)
    assert sorted(n for n, b in search.timed if b == r2) == [
        "eng0_k2=0", "eng0_k2=1", "eng0_k2=2", "eng0_k2=3"]
    assert c["eng0_k2=3"].left_round == 2 and c["eng0_k2=3"].left_note == \
        "left after round 2 at 1.20x the best"
    finals = sorted(n for n, b in search.timed if b == FULL.budget_ms)
    assert finals == ["eng0_k2=0", "eng0_k2=1", "eng0_k2=2"]
    assert sorted(n for n, b in checked if b == FULL.budget_ms) == finals
    # Note [records checked]: before the finals, only a config that led its round when
    # timed (here the first tried, then the fastest), and never one checked before
    assert first[:2] == ["eng0_k2=0", "eng0_k2=1"] and [
        (n, b) for n, b in checked if b != FULL.budget_ms] == [("eng0_k2=0", r1),
                                                                ("eng0_k2=1", r1)]
    assert c["eng0_k2=4"].brief_note == \
        "left after round 1 at 1.40x the best (timed briefly, not checked)"
    assert sp.best().tag == "ConvFwd_eng0_k2=1" and sp.best().correct is True
    assert [c.tag for c in sp.ranked()] == ["ConvFwd_eng0_k2=1", "ConvFwd_eng0_k2=2",
                                            "ConvFwd_eng0_k2=0"]  # finalists only
    assert [(r["round"], r["timed"], r.get("left")) for r in sp.rounds] == [
        (1, 6, 2), (2, 4, 1), ("final", 3, None)]
    # Note [round 1's samples], Note [round budgets]: the rounds' samples are short, so
    # that the native floor of five samples fits in their budgets; the finalists sample
    # as the full timing does
    assert {(b, s) for b, s in search.samples} == {
        (r1, ROUNDS[0].sample_ms), (r2, ROUNDS[1].sample_ms), (FULL.budget_ms, FULL.sample_ms)}
    assert all(r.sample_ms * 5 <= r.budget_ms < FULL.budget_ms for r in ROUNDS)
    assert FULL.sample_ms == 1.0


def test_each_config_records_the_time_its_checks_took(monkeypatch):
    """check_ms: every check of a config together (the breakdown's "checks"); None for a
    config never checked."""
    search = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    sp, checked = explore(search, monkeypatch, check_s=0.02)
    c = by_tag(sp)
    times = {}
    for name, _ in checked:
        times[name] = times.get(name, 0) + 1
    assert times == {"eng0_k2=0": 2, "eng0_k2=1": 2, "eng0_k2=2": 1}  # led round 1, finals
    for name, n in times.items():
        assert n * 20.0 <= c[name].check_ms < n * 20.0 + 200.0
    assert [c[n].check_ms for n in ("eng0_k2=3", "eng0_k2=4", "eng0_k2=5")] == [None] * 3


def test_finalists_warm_up_briefly_but_sample_in_full(monkeypatch):
    """Note [finalists' warm-up]: a finalist, timed in every round before, warms up for
    FINAL_WARMUP_MS; its budget and eager loop are the full timing's. Unstaged, every
    config warms up for the full timing's warm-up."""
    search = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    explore(search, monkeypatch)
    r1, r2 = ROUNDS[0], ROUNDS[1]
    assert set(search.warmups) == {(r1.budget_ms, r1.warmup_ms, 0.0),
                                   (r2.budget_ms, r2.warmup_ms, 0.0),
                                   (FULL.budget_ms, FINAL_WARMUP_MS, FULL.eager_budget_ms)}
    assert FINAL_WARMUP_MS < FULL.warmup_ms and FULL.eager_budget_ms > 0
    unstaged = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    explore(unstaged, monkeypatch, staged=False)
    assert set(unstaged.warmups) == {(FULL.budget_ms, FULL.warmup_ms, FULL.eager_budget_ms)}


def test_a_wrong_config_never_ranks_best_nor_sends_correct_ones_away(monkeypatch):
    """Note [records checked]: the fastest config is WRONG; checked as it leads round 1,
    it leaves there (nothing names it) and sets neither the round's best nor the cutoff,
    so 1.05 (which unchecked, 2.1x behind it, would have left) is the best."""
    #            k2=0 (heuristic A's first)  1 (WRONG)  2      3      4      5
    search = Search([1.50, 0.50, 1.05, 1.20, 1.40, 3.00])
    sp, checked = explore(search, monkeypatch, wrong={"eng0_k2=1"})
    c = by_tag(sp)
    assert ("eng0_k2=1", ROUNDS[0].budget_ms) in checked and c["eng0_k2=1"].correct is False
    assert c["eng0_k2=1"].left_round == 1 and c["eng0_k2=1"].left_ratio is None
    assert c["eng0_k2=1"].brief_note == "left after round 1 (timed briefly)"
    assert ("eng0_k2=1", FULL.budget_ms) not in search.timed
    # every cutoff after it is 3x a correct config's time, never 3x the WRONG one's 0.5
    assert all(co >= 3.0 for n, co in search.cutoffs[2:] if co)
    assert sp.best().tag == "ConvFwd_eng0_k2=2" and c["eng0_k2=2"].correct is True
    assert [(r["round"], r["timed"], r.get("left")) for r in sp.rounds][0] == (1, 6, 3)


def test_pytorchs_wrong_pick_is_timed_in_full_but_sets_no_bar(monkeypatch):
    #            k2=0 (heuristic A's first)  1 (PyTorch's, WRONG)  2      3
    search = Search([1.50, 0.50, 1.05, 1.40])
    sp, checked = explore(search, monkeypatch, wrong={"eng0_k2=1"},
                          finalists=["ConvFwd_eng0_k2=1"])
    c = by_tag(sp)
    assert c["eng0_k2=1"].left_round is None and c["eng0_k2=1"].correct is False
    assert ("eng0_k2=1", FULL.budget_ms) in checked  # timed in full and shown WRONG
    # the bar is the best correct config's 1.05, not the WRONG pick's 0.5: 1.40 leaves at
    # 1.33x it (against 0.5 it would have left at 2.8x, and 1.05 with it at 2.1x)
    assert c["eng0_k2=3"].left_round == 1 and c["eng0_k2=3"].left_ratio == \
        pytest.approx(1.40 / 1.05)
    assert c["eng0_k2=2"].left_round is None and sp.best().tag == "ConvFwd_eng0_k2=2"


def test_a_config_wrong_once_it_leads_round_two_leaves_there(monkeypatch):
    """Round 2 checks the config that leads it when it was not checked before; a WRONG
    one leaves in round 2 and the next one leads."""
    class Faster(Search):  # k2=2 is the fastest in round 2 only
        def measure(self, built, timed, opt):
            if opt.budget_ms == ROUNDS[1].budget_ms and built.name.endswith("=2"):
                self.times = [*self.times[:2], 0.9, *self.times[3:]]
            elif built.name.endswith("=2"):
                self.times = [*self.times[:2], 1.05, *self.times[3:]]
            return super().measure(built, timed, opt)

    search = Faster([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    sp, checked = explore(search, monkeypatch, wrong={"eng0_k2=2"})
    c = by_tag(sp)
    assert ("eng0_k2=2", ROUNDS[0].budget_ms) not in checked  # 1.05 led nothing there
    assert ("eng0_k2=2", ROUNDS[1].budget_ms) in checked
    assert c["eng0_k2=2"].left_round == 2 and c["eng0_k2=2"].correct is False
    assert sp.best().tag == "ConvFwd_eng0_k2=1"


def test_pytorchs_pick_and_noisy_configs_stay_to_the_final_round(monkeypatch):
    search = Search([1.0, 1.02, 2.5, 1.9, 4.0, 1.0], spreads={3: 0.25})
    sp, _ = explore(search, monkeypatch, finalists=["ConvFwd_eng0_k2=4"])
    c = by_tag(sp)
    assert c["eng0_k2=4"].left_round is None and c["eng0_k2=4"].correct is True  # 4x: named
    # noisy in round 1: stays (the fast end of its noise is within 1.3x); not in round 2
    assert c["eng0_k2=3"].left_round == 2
    assert c["eng0_k2=2"].left_round == 1
    assert c["eng0_k2=0"].left_round is None and c["eng0_k2=5"].left_round is None  # a tie
    assert sp.best().tag in ("ConvFwd_eng0_k2=0", "ConvFwd_eng0_k2=5")


def test_an_exhausted_budget_stages_what_was_timed(monkeypatch):
    import time as real_time

    from cudnn_explorer.measure import engines as eng

    clock = iter(range(0, 10**6))
    monkeypatch.setattr(eng.time, "perf_counter", lambda: float(next(clock)))
    search = Search([1.0, 1.5, 1.01, 1.02, 1.03, 1.04])
    sp, checked = explore(search, monkeypatch, budget_s=12)
    assert real_time.perf_counter is not None
    assert sp.budget_exhausted and 0 < len(sp.configs) < 6
    assert sp.rounds[-1]["round"] == "final" and sp.rounds[-1]["timed"] == len(
        [n for n, b in checked if b == FULL.budget_ms]) > 0
    assert sp.best() is not None and sp.best().correct is True


def test_without_staging_every_config_is_timed_in_full_and_checked(monkeypatch):
    search = Search([1.5, 1.0, 3.0])
    sp, checked = explore(search, monkeypatch, staged=False)
    assert {b for _, b in search.timed} == {FULL.budget_ms} and len(checked) == 3
    assert sp.rounds == [] and all(c.left_round is None for c in sp.configs)


def test_a_staged_space_saves_reads_back_and_reports_its_rounds(monkeypatch):
    from cudnn_explorer.core.records import EngineSpace
    from cudnn_explorer.report.engines import staged_line

    search = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    sp, _ = explore(search, monkeypatch)
    again = EngineSpace.from_dict(sp.to_dict())
    assert again.to_dict() == sp.to_dict() and again.best().tag == sp.best().tag
    assert all(r["wall_s"] >= 0 for r in again.rounds)
    assert " s and 2 left" in staged_line(again)
    for r in again.rounds:
        del r["wall_s"]
    assert staged_line(again) == (
        f"staged search: round 1 timed 6 configs ({ROUNDS[0].budget_ms:g} ms each) and 2 "
        f"left, more than 1.3x behind the best; round 2 timed 4 configs "
        f"({ROUNDS[1].budget_ms:g} ms each) and 1 left, more than 1.08x behind the best; "
        f"3 finalists timed with the full 25 ms and checked")
    again.rounds[-1]["timed"] = 1
    again.rounds[1]["timed"] = 1
    assert "round 2 timed 1 config (" in staged_line(again)
    assert staged_line(again).endswith("; 1 finalist timed with the full 25 ms and checked")


def test_a_restarted_worker_stages_the_configs_an_earlier_one_timed(monkeypatch):
    """A worker that died in a later round: its successor takes the first round's records
    (prior), builds their plans again and stages them, without the config that hung."""
    from cudnn_explorer.measure import engines as eng

    monkeypatch.setattr(eng, "check_output", lambda *a: NS(max_error=1e-4, tolerance=1e-2,
                                                           output_finite=True))
    events = []
    first = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    settings = SearchSettings(max_per_engine=16, time_budget_s=None, timing=FULL,
                              kernels=False, staged=True)
    data = DirectionData(exploration().problem, "fwd", None,
                         {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()}, object())
    eng.explore_engines(data, settings, Supervision(on_event=events.append),
                        eng.PreparedSearch(first))
    attempts = [e["attempt"] for e in events if "attempt" in e]
    hung = {"engine": 0, "knobs": [[2, 2]], "tag": "ConvFwd_eng0_k2=2", "status": "hung",
            "message": "timed out in round 2"}
    second = Search([1.50, 1.00, 1.05, 1.20, 1.40, 3.00])
    sp = eng.explore_engines(data, settings,
                             Supervision(prior={"attempts": attempts, "failed": [hung]}),
                             eng.PreparedSearch(second))
    tags = [c.tag for c in sp.configs]
    assert len(tags) == len(set(tags)) == 6  # the hung one once, as failed
    assert by_tag(sp)["eng0_k2=2"].status == "hung"
    assert all(b != ROUNDS[0].budget_ms for _, b in second.timed)  # round 1 not again
    assert sorted(second.names) == ["eng0_k2=0", "eng0_k2=1", "eng0_k2=3"]  # rebuilt
    assert sp.best().tag == "ConvFwd_eng0_k2=1"


def test_the_cutoff_is_three_times_the_best_so_far_and_at_least_its_floor():
    assert cutoff_ms(None) == 0.0 and cutoff_ms(0.0) == 0.0  # nothing timed yet: no cutoff
    assert cutoff_ms(0.1) == CUT_FLOOR_MS == 1.0  # a launch under 1 ms is never cut
    assert cutoff_ms(2.0) == pytest.approx(6.0)


def test_a_config_far_behind_is_cut_in_round_one_unless_it_is_named(monkeypatch):
    #            k2=0 (heuristic A's first)  1      2      3     4 (named)
    search = Search([1.0, 10.0, 1.05, 4.0, 20.0])
    # both named, as PyTorch's picks are (tried first, in this order)
    sp, checked = explore(search, monkeypatch,
                          finalists=["ConvFwd_eng0_k2=0", "ConvFwd_eng0_k2=4"])
    c = by_tag(sp)
    cut_in_1 = dict((n, co) for (n, b), (_, co) in zip(search.timed, search.cutoffs)
                    if b == ROUNDS[0].budget_ms)
    assert cut_in_1["eng0_k2=0"] == 0.0  # the first config: nothing to compare with
    assert all(co == pytest.approx(3.0) for n, co in cut_in_1.items() if n != "eng0_k2=0")
    # later rounds time in full: no cutoff
    assert all(co == 0.0 for (n, b), (_, co) in zip(search.timed, search.cutoffs)
               if b != ROUNDS[0].budget_ms)
    for k, ratio in ((1, 10.0), (3, 4.0)):
        cfg = c[f"eng0_k2={k}"]
        assert cfg.timing.method == "cut" and cfg.timing.samples == 1
        assert cfg.left_round == 1 and cfg.left_ratio == pytest.approx(ratio)
        assert cfg.left_note == f"left after round 1 at {ratio:.2f}x the best " \
                                "(cut after two launches)"
    # cut too, but named: timed in full in round 2 and the final
    named = c["eng0_k2=4"]
    assert cut_in_1["eng0_k2=4"] == pytest.approx(3.0)
    assert ("eng0_k2=4", ROUNDS[1].budget_ms) in search.timed
    assert named.left_round is None and named.timing.method == "graph"
    assert sp.best().tag == "ConvFwd_eng0_k2=0" and sorted(
        n for n, b in checked if b == FULL.budget_ms) == ["eng0_k2=0", "eng0_k2=2", "eng0_k2=4"]
    # the summary names the methods of its own rows: none of them is a cut config
    import dataclasses

    from cudnn_explorer.report.engines import summary_methods
    from cudnn_explorer.report.tables import render_exploration

    e = exploration()
    e = dataclasses.replace(e, directions=[dataclasses.replace(e.directions[0], engines=sp)])
    assert summary_methods(e) == {"graph"}
    assert "== summary: steady-state median and eager wall time per launch or call (ms), " \
        "one timing method for all (graph)" in render_exploration(e)


def test_unstaged_configs_are_never_cut(monkeypatch):
    search = Search([1.0, 10.0, 1.05])
    explore(search, monkeypatch, staged=False)
    assert {co for _, co in search.cutoffs} == {0.0}


class Lab:
    """LegacyLab's methods over rows (name, time ms, deterministic, wrong); each measure
    recorded as (name, budget, cutoff, checked), cut as csrc/timing.cpp cuts, checked as
    LegacyLab checks (Note [records checked])."""

    def __init__(self, rows, heuristic_first, oom=(), later=None):
        self.rows, self.first, self.measured, self.oom = rows, heuristic_first, [], set(oom)
        self.specs = []  # every TimingSpec asked for, in order
        self.later = later or {}  # {(name, budget): its time in that round instead}
        self.reference_on_cpu = False
        self.setup_s, self.checks_s = 0.5, 0.0  # a check costs 0.01 s here

    def find(self, cap):
        found = [NS(algo=i, algo_name=n, math_type="DEFAULT_MATH", status="CUDNN_STATUS_SUCCESS",
                    status_code=0, time_ms=t, memory_bytes=0, deterministic=det,
                    found_under="DEFAULT_MATH") for i, (n, t, det, _) in enumerate(self.rows)]
        first = next(r for r in found if r.algo_name == self.first)
        return NS(math_type="DEFAULT_MATH", find=found, heuristics=[first], workspace=[],
                  workspace_needed=0, workspace_given=0, requested=16, returned=len(found),
                  find_wall_ms=1.0, find_wall_ms_all=1.0, searched=["DEFAULT_MATH"],
                  workspace_free=-1, find_errors=[])

    def measure(self, algo, math_type, spec, check, cutoff_ms=0.0, records=False,
                records_over=None):
        from cudnn_explorer.core.records import Timing
        from cudnn_explorer.core.staging import is_record
        from cudnn_explorer.measure.tensors import Check

        name, t, _, wrong = self.rows[algo]
        self.specs.append(spec)
        t = self.later.get((name, spec.budget_ms), t)
        if (name, spec.budget_ms) in self.oom:
            self.measured.append((name, spec.budget_ms, cutoff_ms, False))
            from cudnn_explorer.core.errors import ResourceError
            raise ResourceError(f"out of GPU memory timing {name}")
        if 0 < cutoff_ms < t:
            timing = Timing.from_samples([t], 1, "cut", 1)
        else:
            timing = Timing.from_samples([t] * 5, 10, spec.method, 12, "",
                                         [t] * 5 if spec.eager_budget_ms else [], 10)
        check = check and (not records or is_record(timing.median_ms, records_over))
        self.measured.append((name, spec.budget_ms, cutoff_ms, check))
        self.checks_s += 0.01 if check else 0.0
        return timing, (Check(1.0 if wrong else 1e-4, 1e-2, True) if check else None)

    def kernels(self, algo, math_type):
        return (f"kernel_{algo}",)


def test_legacy_rows_are_staged_like_engine_configs():
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.legacy import measure_legacy
    from cudnn_explorer.report.tables import flags

    rows = [("IMPLICIT_GEMM", 1.0, False, False),
            ("GEMM", 0.5, False, True),              # the fastest, but WRONG
            ("FFT", 5.0, False, False),              # cut in round 1
            ("WINOGRAD", 1.05, False, False),        # the heuristics' first
            ("DIRECT", 1.2, False, False),           # leaves in round 2
            ("IMPLICIT_PRECOMP_GEMM", 2.0, False, False),  # PyTorch's legacy pick
            ("FFT_TILING", 1.6, True, False)]        # the fastest deterministic row
    lab = Lab(rows, "WINOGRAD")
    options = ExploreOptions.create(budget_ms=25, staged=True)
    leg = measure_legacy(exploration().problem, "fwd", lab, options, "NVIDIA H200", True,
                         finalists=["IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)"])
    got = {r.algo_name: r for r in leg.find}
    r1, r2 = ROUNDS[0].budget_ms, ROUNDS[1].budget_ms
    first = [m for m in lab.measured if m[1] == r1]
    assert [m[0] for m in first] == [r[0] for r in rows]  # every row briefly
    assert first[0][2] == 0.0  # the first: no cutoff
    # checked when it leads the round (Note [records checked]): the first, then the WRONG
    # fastest, which sets no best, so no other row leads after it
    assert [m[0] for m in first if m[3]] == ["IMPLICIT_GEMM", "GEMM"]
    # the cutoff is 3x the best correct time so far, never the WRONG row's
    assert all(m[2] == pytest.approx(3.0) for m in first[1:])
    assert got["GEMM"].left_round == 1 and got["GEMM"].correct is False
    assert got["FFT"].left_round == 1 and got["FFT"].left_ratio == pytest.approx(5.0)
    assert got["FFT"].timing.method == "cut"
    assert "left after round 1 at 5.00x the best (cut after two launches) (timed briefly, " \
        "not checked)" in flags(got["FFT"])
    # Note [one-launch cut]: a sample from the first launch alone is a lower bound
    one = dataclasses.replace(got["FFT"], timing=dataclasses.replace(got["FFT"].timing,
                                                                     warmup_launches=0))
    assert one.left_note == "left after round 1 at 5.00x the best or more (cut after one launch)"
    assert dataclasses.replace(one, left_ratio=None).left_note == \
        "left after round 1 (cut after one launch)"
    assert "WRONG>1e-02, left after round 1 (timed briefly)" in flags(got["GEMM"])
    assert sorted(m[0] for m in lab.measured if m[1] == r2) == [
        "DIRECT", "FFT_TILING", "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "WINOGRAD"]
    assert got["DIRECT"].left_round == 2 and got["DIRECT"].left_ratio == pytest.approx(1.2)
    assert not any(m[3] for m in lab.measured if m[1] == r2)  # none led round 2 unchecked
    finals = sorted(m[0] for m in lab.measured if m[1] == 25)
    assert finals == ["FFT_TILING", "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "WINOGRAD"]
    assert all(m[3] and m[2] == 0.0 for m in lab.measured if m[1] == 25)
    for name in finals:  # timed in full: the eager loop included, no left note
        assert got[name].left_round is None and got[name].timing.eager is not None
    # each round's count and wall time, for --verbose (core/walltime.py)
    assert [(r["round"], r["timed"], r.get("left")) for r in leg.rounds] == [
        (1, 7, 2), (2, 5, 1), ("final", 4, None)]
    assert all(r["wall_s"] >= 0 for r in leg.rounds)
    # where the lab's time went (DirectionResult.legacy_setup_s, legacy_checks_s)
    assert leg.setup_s == 0.5
    assert leg.checks_s == pytest.approx(0.01 * sum(1 for m in lab.measured if m[3]))
    # Note [finalists' warm-up]: the finalists warm up for FINAL_WARMUP_MS
    assert {(s.budget_ms, s.warmup_ms, s.eager) for s in lab.specs if s.budget_ms == 25} == {
        (25, FINAL_WARMUP_MS, True)}
    # only finalists rank: the best is the fastest correct one
    from cudnn_explorer.core.records import rankable
    assert min((r for r in leg.find if rankable(r)), key=lambda r: r.time).algo_name == \
        "IMPLICIT_GEMM"
    assert got["IMPLICIT_GEMM"].kernels == ["kernel_0"]


def test_a_round_that_can_send_none_away_is_not_timed():
    """Note [decided rounds]: with one candidate left, or only named ones, round 2 times
    none and says why; the finalists are still timed in full and checked."""
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.core.staging import decided, skipped_round
    from cudnn_explorer.measure.legacy import measure_legacy

    assert decided([], []) == "no candidate left"
    assert decided(["a"], []) == "1 candidate left"
    assert decided(["a", "b"], ["a"]) is None
    assert decided(["a", "b"], ["a", "b", "c"]) == \
        "every candidate left is named, so each stays"
    assert skipped_round(2, "why", budget_ms=4.0) == {
        "round": 2, "budget_ms": 4.0, "timed": 0, "left": 0, "wall_s": 0.0, "skipped": "why"}
    # legacy rows: one row within 1.3x after round 1
    rows = [("IMPLICIT_GEMM", 1.0, False, False), ("FFT", 2.0, False, False),
            ("WINOGRAD", 1.6, False, False)]
    lab = Lab(rows, "IMPLICIT_GEMM")
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=True), "NVIDIA H200", True)
    assert not [m for m in lab.measured if m[1] == ROUNDS[1].budget_ms]
    assert [m[0] for m in lab.measured if m[1] == 25] == ["IMPLICIT_GEMM"]
    assert all(m[3] for m in lab.measured if m[1] == 25)  # the finalist is checked
    assert [(r["round"], r["timed"], r.get("left"), r.get("skipped")) for r in leg.rounds] == [
        (1, 3, 2, None), (2, 0, 0, "1 candidate left"), ("final", 1, None, None)]
    # named rows only: PyTorch's legacy pick stays whatever its time, so round 2 decides
    # nothing either
    lab = Lab(rows, "IMPLICIT_GEMM")
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=True), "NVIDIA H200", True,
                         finalists=["FFT (DEFAULT_MATH)"])
    assert leg.rounds[1]["skipped"] == "every candidate left is named, so each stays"
    assert sorted(m[0] for m in lab.measured if m[1] == 25) == ["FFT", "IMPLICIT_GEMM"]


def test_engine_configs_skip_a_round_that_decides_nothing(monkeypatch):
    """Note [decided rounds] for engine configs: heuristic A's first alone within 1.3x."""
    search = Search([1.00, 2.00, 3.00])
    sp, checked = explore(search, monkeypatch)
    assert not [n for n, b in search.timed if b == ROUNDS[1].budget_ms]
    assert [(r["round"], r["timed"], r.get("left"), r.get("skipped")) for r in sp.rounds] == [
        (1, 3, 2, None), (2, 0, 0, "1 candidate left"), ("final", 1, None, None)]
    assert [n for n, b in checked if b == FULL.budget_ms] == ["eng0_k2=0"]
    from cudnn_explorer.report.engines import staged_line

    assert "round 2 not timed (1 candidate left)" in staged_line(sp)
    assert sp.best().tag == "ConvFwd_eng0_k2=0" and sp.best().correct is True


def test_a_legacy_row_wrong_once_it_leads_round_two_leaves_there():
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.legacy import measure_legacy

    rows = [("IMPLICIT_GEMM", 1.0, False, False), ("WINOGRAD", 1.05, False, True),
            ("FFT", 1.2, True, False)]
    lab = Lab(rows, "IMPLICIT_GEMM", later={("WINOGRAD", ROUNDS[1].budget_ms): 0.9})
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=True), "NVIDIA H200", True)
    got = {r.algo_name: r for r in leg.find}
    assert [(m[0], m[1]) for m in lab.measured if m[3]] == [
        ("IMPLICIT_GEMM", ROUNDS[0].budget_ms), ("WINOGRAD", ROUNDS[1].budget_ms),
        ("IMPLICIT_GEMM", 25), ("FFT", 25)]
    assert got["WINOGRAD"].left_round == 2 and got["WINOGRAD"].correct is False
    assert got["IMPLICIT_GEMM"].left_round is None and got["IMPLICIT_GEMM"].correct is True


def test_pytorchs_wrong_legacy_pick_is_timed_in_full_but_sets_no_bar():
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.legacy import measure_legacy

    rows = [("IMPLICIT_GEMM", 1.0, False, False), ("GEMM", 0.5, False, True),
            ("FFT", 1.4, True, False)]
    lab = Lab(rows, "IMPLICIT_GEMM")
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=True), "NVIDIA H200", True,
                         finalists=["GEMM (DEFAULT_MATH)"])
    got = {r.algo_name: r for r in leg.find}
    assert got["GEMM"].left_round is None and got["GEMM"].correct is False
    assert ("GEMM", 25) in [(m[0], m[1]) for m in lab.measured]
    # 1.4x the correct best, not 2.8x the WRONG one: FFT stays as the fastest deterministic
    # row, IMPLICIT_GEMM ranks best
    assert got["FFT"].left_round is None
    from cudnn_explorer.core.records import rankable
    assert [r.algo_name for r in leg.find if rankable(r)] == ["IMPLICIT_GEMM", "FFT"]


def test_unstaged_legacy_rows_are_timed_once_in_full():
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.legacy import measure_legacy

    lab = Lab([("IMPLICIT_GEMM", 1.0, False, False), ("FFT", 5.0, False, False)], "FFT")
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=False), "NVIDIA H200", True)
    assert [(m[0], m[1], m[2]) for m in lab.measured] == [("IMPLICIT_GEMM", 25, 0.0),
                                                          ("FFT", 25, 0.0)]
    assert all(r.left_round is None for r in leg.find)


def test_a_legacy_row_out_of_memory_in_a_later_round_keeps_its_time_and_says_why():
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.legacy import measure_legacy

    rows = [("IMPLICIT_GEMM", 1.0, False, False), ("WINOGRAD", 1.02, False, False),
            ("FFT", 1.04, True, False)]
    lab = Lab(rows, "IMPLICIT_GEMM", oom=[("WINOGRAD", ROUNDS[1].budget_ms),
                                          ("FFT", 25)])
    leg = measure_legacy(exploration().problem, "fwd", lab,
                         ExploreOptions.create(budget_ms=25, staged=True), "NVIDIA H200", True)
    got = {r.algo_name: r for r in leg.find}
    # out of memory in round 2: its round-1 time stays, it leaves there, the note says why
    assert got["WINOGRAD"].left_round == 2 and got["WINOGRAD"].timing.median_ms == 1.02
    assert "out of GPU memory" in got["WINOGRAD"].note
    # out of memory when timed in full: it keeps its round-2 time and does not rank
    assert got["FFT"].left_round == 2 and "out of GPU memory" in got["FFT"].note
    assert got["IMPLICIT_GEMM"].left_round is None and got["IMPLICIT_GEMM"].timing.eager


def test_a_round_samples_no_longer_than_the_full_timing():
    from cudnn_explorer.core.staging import round_timing

    fine = TimingSpec(budget_ms=25.0, sample_ms=0.05)
    assert [round_timing(fine, r).sample_ms for r in ROUNDS] == [0.05, 0.05]
    assert [round_timing(FULL, r).sample_ms for r in ROUNDS] == [0.1, 0.5]
    first = round_timing(FULL, ROUNDS[0])
    assert not first.eager and first.budget_ms == 0.5 and first.warmup_ms == 0.2
    # a brief full timing's budget and warm-up bound a round's
    brief = round_timing(TimingSpec(budget_ms=0.3, warmup_ms=0.1), ROUNDS[1])
    assert (brief.budget_ms, brief.warmup_ms) == (0.3, 0.1)
    # Note [batched rounds]: a round's spec is timed batched, the full timing is not
    from cudnn_explorer.measure import native

    assert native.timing_options(round_timing(FULL, ROUNDS[1])).batched
    assert not native.timing_options(FULL).batched
