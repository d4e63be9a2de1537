"""Where explorations spent their wall time, summed over directions (core/walltime.py),
and the model report's line that says it."""
import dataclasses

import fakes
from pytest import approx
from cudnn_explorer.core.records import EngineConfig, EngineSpace
from cudnn_explorer.core.model_sweep import SweepEntry
from cudnn_explorer.core.walltime import SearchTime, search_time, sweep_search_time
from cudnn_explorer.report.format import search_time_text


def staged(legacy_s, find_ms, engines_s, builds_ms, rounds, direction="fwd"):
    """A direction with walls recorded: ``rounds`` [(round, timed, left, wall_s)]."""
    configs = [EngineConfig(tag=f"ConvFwd_eng{i}", engine=i, status="OK", build_ms=b)
               for i, b in enumerate(builds_ms)]
    space = EngineSpace(configs=configs, rounds=[
        {"round": r, "timed": timed, "left": left, "wall_s": s} if r != "final"
        else {"round": r, "timed": timed, "wall_s": s} for r, timed, left, s in rounds])
    return dataclasses.replace(fakes.fwd_result(), direction=direction, legacy_wall_s=legacy_s,
                               find_wall_ms_all=find_ms, engines_wall_s=engines_s,
                               engines=space)


A = staged(1.5, 100.0, 3.0, [50.0, 50.0, 100.0], [(1, 3, 1, 2.0), (2, 2, 1, 0.5),
                                                   ("final", 1, None, 0.3)])
B = staged(0.5, 50.0, 1.0, [100.0], [(1, 1, 0, 0.6), (2, 1, 0, 0.1), ("final", 1, None, 0.2)],
           "bwd-data")


def test_search_time_sums_the_parts_and_counts_where_configs_left():
    t = search_time([A, B])
    assert (t.directions, t.legacy_s, t.engines_s, t.configs) == (2, 2.0, 4.0, 4)
    assert (t.find_s, t.builds_s, t.measured_s) == (approx(0.15), approx(0.3), 6.0)
    assert [n for n, _ in t.rounds] == ["round 1", "round 2", "finalists"]
    assert [s for _, s in t.rounds] == approx([2.6, 0.6, 0.5])
    assert t.left == (("round 1", 1), ("round 2", 1), ("finalists", 2))
    assert search_time_text(t, counts=True) == (
        "legacy rows 2.0 s (Find 0.2 s); engine configs 4.0 s, plan builds 0.3 s, round 1 "
        "2.6 s, round 2 0.6 s, finalists 0.5 s (4 configs; 1 left after round 1; 1 left "
        "after round 2; 2 timed in full)")
    # one direction as the single problem's --verbose says it: no counts
    assert search_time_text(search_time([B])) == (
        "legacy rows 0.5 s (Find 0.1 s); engine configs 1.0 s, plan builds 0.1 s, round 1 "
        "0.6 s, round 2 0.1 s, finalists 0.2 s")


def test_plans_built_ahead_are_said_with_the_builds():
    """Note [engine search ahead]: listing and plan builds done during the legacy rows are
    summed apart, and said with the builds (they are not in the engine configs' wall)."""
    ahead = dataclasses.replace(A, engines=dataclasses.replace(A.engines, ahead_s=0.25))
    t = search_time([ahead, B])
    assert t.ahead_s == approx(0.25) and t.engines_s == 4.0
    assert search_time_text(t).startswith(
        "legacy rows 2.0 s (Find 0.2 s); engine configs 4.0 s, plan builds 0.3 s (0.2 s "
        "listing and building ahead, during the legacy rows), round 1 2.6 s")
    assert search_time([A, B]).ahead_s is None  # none recorded: nothing said
    assert EngineSpace.from_dict(ahead.engines.to_dict()).ahead_s == 0.25


def test_what_was_not_recorded_is_left_out_not_counted_as_zero():
    old = dataclasses.replace(fakes.fwd_result(), legacy_wall_s=None, engines_wall_s=None)
    assert search_time([old]) == SearchTime(directions=1)
    assert search_time_text(search_time([old])) == "" and search_time([]).measured_s is None
    unstaged = dataclasses.replace(A, engines=dataclasses.replace(A.engines, rounds=[]))
    t = search_time([unstaged])
    assert t.rounds == () and t.left == () and t.builds_s == approx(0.2)
    assert search_time_text(t, counts=True) == (
        "legacy rows 1.5 s (Find 0.1 s); engine configs 3.0 s, plan builds 0.2 s (3 configs)")
    no_engines = dataclasses.replace(A, engines=None, engines_wall_s=None)
    assert search_time_text(search_time([no_engines])) == "legacy rows 1.5 s (Find 0.1 s)"


def test_a_sweep_leaves_out_problems_answered_from_the_store():
    exp = dataclasses.replace(fakes.exploration(), directions=[A, B])
    measured = SweepEntry(0, exp, seconds=6.2)
    stored = SweepEntry(1, exp, seconds=0.05)  # its walls were recorded by an earlier run
    failed = SweepEntry(2, None, "CudnnError: no", seconds=0.1)
    old = SweepEntry(3, exp)  # a sweep saved before it recorded seconds
    t, n = sweep_search_time([measured, stored, failed, old])
    assert n == 1 and t.directions == 4 and t.measured_s == 12.0
    assert sweep_search_time([])[0] == SearchTime()


def test_the_legacy_rows_rounds_are_summed_and_said_inside_their_time():
    """A staged search's legacy rounds (DirectionResult.legacy_rounds) are summed like the
    engine configs' and said beside Find; a direction recorded before them says Find
    alone, and the field survives a saved file."""
    from cudnn_explorer.core.records import DirectionResult

    a = dataclasses.replace(A, legacy_rounds=[
        {"round": 1, "timed": 6, "left": 4, "wall_s": 0.4},
        {"round": 2, "timed": 2, "left": 0, "wall_s": 0.1},
        {"round": "final", "timed": 2, "wall_s": 0.3}])
    b = dataclasses.replace(B, legacy_rounds=[
        {"round": 1, "timed": 3, "left": 1, "wall_s": 0.2},
        {"round": 2, "timed": 2, "left": 1, "wall_s": 0.02},
        {"round": "final", "timed": 1, "wall_s": 0.17}])
    t = search_time([a, b])
    assert [n for n, _ in t.legacy_rounds] == ["round 1", "round 2", "finalists"]
    assert [s for _, s in t.legacy_rounds] == approx([0.6, 0.12, 0.47])
    assert search_time_text(t).startswith(
        "legacy rows 2.0 s (Find 0.2 s, round 1 0.6 s, round 2 0.1 s, finalists 0.5 s); "
        "engine configs 4.0 s")
    assert search_time([A]).legacy_rounds == ()
    assert search_time_text(search_time([A])).startswith("legacy rows 1.5 s (Find 0.1 s);")
    assert DirectionResult.from_dict(a.to_dict()).legacy_rounds == a.legacy_rounds


def test_the_tensors_reference_and_checks_are_said_where_recorded():
    """The legacy rows' tensors and float64 reference (in their time) and the checks
    against the reference, within the legacy rows' and the engine configs' rounds, each
    summed over directions; a config checked in two rounds counts both checks."""
    checked = [dataclasses.replace(c, check_ms=ms)
               for c, ms in zip(A.engines.configs, (4.0, None, 16.0))]
    a = dataclasses.replace(A, legacy_setup_s=0.2, legacy_checks_s=0.05,
                            engines=dataclasses.replace(A.engines, configs=checked))
    b = dataclasses.replace(B, legacy_setup_s=0.1, legacy_checks_s=0.05)
    t = search_time([a, b])
    assert (t.setup_s, t.legacy_checks_s, t.engine_checks_s) == (
        approx(0.3), approx(0.1), approx(0.02))
    assert search_time_text(t) == (
        "legacy rows 2.0 s (tensors and reference 0.3 s, Find 0.2 s; checks 0.1 s of those); "
        "engine configs 4.0 s, plan builds 0.3 s, round 1 2.6 s, round 2 0.6 s, finalists "
        "0.5 s, checks 0.0 s of the rounds")
    # B's configs recorded no check time (none checked, or saved before it was recorded):
    # it adds nothing, and alone it says nothing of checks
    assert "checks" not in search_time_text(search_time([B]))
    back = type(a).from_dict(a.to_dict())
    assert (back.legacy_setup_s, back.legacy_checks_s) == (0.2, 0.05)
    assert [c.check_ms for c in back.engines.configs] == [4.0, None, 16.0]
