"""GPU: PyTorch's own choice, identified from its logs, checked against independent evidence
(the kernels it launched, and the kernels of our legacy rows)."""
import pytest

from cudnn_explorer.core.problem import ConvProblem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def explored():
    import cudnn_explorer

    p = ConvProblem.create("8,64,28,28", out_channels=64, dtype="float16", layout="nhwc")
    return cudnn_explorer.explore(p, budget_ms=10, pytorch=True, engines=False,
                                  child_timeout_s=240)


def test_every_mode_measured_in_every_direction(explored):
    for d in explored.directions:
        assert [p.label for p in d.pytorch] == [
            "benchmark", "benchmark, limit 0 (all)", "heuristics (benchmark off)",
            "deterministic", "legacy API, benchmark"]
        for p in d.pytorch:
            assert p.ok, (d.direction, p.label, p.error)
            assert p.first_call_ms > 0 and p.steady.median_ms > 0 and p.kernels
            assert p.first_peak_alloc_bytes >= 0
            assert p.correct is True, (d.direction, p.label, p.max_error)  # same check as ours
            assert p.steady.method == "graph" and p.steady.eager.median_ms > 0


def test_logged_winner_launches_the_kernels_pytorch_ran(explored):
    """Independent of the log parser's rule: build the config the log names with our own
    EngineSearch, run it under the profiler, and compare its kernels with those the
    profiler saw PyTorch launch in that mode. Deterministic mode's pick must also carry
    no NONDETERMINISTIC note, and limit 0 times at least as many plans as the default."""
    from cudnn_explorer.core.logs import parse_tag
    from cudnn_explorer.measure import native, pipeline
    from cudnn_explorer.measure.kernels import kernel_names

    p = explored.problem
    for d in explored.directions:
        for pick in d.pytorch:
            if pick.api != "engine" or not pick.ok:
                continue
            t = pipeline.make_tensors(p, d.direction)
            search = native.engine_search(d.direction, pipeline.native_problem(p, t))
            tag = parse_tag(pick.engine_tag)
            built = search.build(tag.engine, [list(k) for k in tag.knobs])
            assert built.status == "built", (d.direction, pick.engine_tag, built.message)
            ours = kernel_names(lambda: search.execute(built.plan_index))
            assert sorted(ours) == sorted(pick.kernels), (d.direction, pick.label, ours)
            if pick.mode == "deterministic":
                assert "NONDETERMINISTIC" not in pick.numeric_notes
        full = d.full_search_pick()
        assert full is not None and len(full.timed) >= len(d.pytorch_pick("benchmark").timed)


def test_same_engine_tag_means_same_kernels(explored):
    """The tag parsed from the log names the implementation that then ran: two modes that
    report the same tag must have launched the same kernels (torch.profiler)."""
    for d in explored.directions:
        by_tag = {}
        for p in d.pytorch:
            if p.engine_tag:
                by_tag.setdefault(p.engine_tag, []).append(tuple(p.kernels))
        for tag, ks in by_tag.items():
            assert len(set(ks)) == 1, (d.direction, tag, ks)


def test_legacy_path_algorithm_matches_its_kernels(explored):
    """The algorithm named in cuDNN's API log launches the kernels the profiler saw."""
    for d in explored.directions:
        legacy = next(p for p in d.pytorch if p.api == "legacy")
        assert legacy.legacy_algo is not None
        assert legacy.legacy_algo in legacy.same_kernels_as, (
            d.direction, legacy.legacy_algo, legacy.same_kernels_as)


def test_hung_child_times_out(tmp_path, monkeypatch):
    from cudnn_explorer.core.errors import ChildError
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure import pytorch_picks as children

    (tmp_path / "sleepy_child.py").write_text("import time\ntime.sleep(30)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(ChildError, match="did not finish within 3 s"):
        children.run_child(ConvProblem.create("1,3,8,8"),
                           children.ModeSpec("benchmark", "benchmark"),
                           ExploreOptions.create(directions="fwd", child_timeout_s=3),
                           child_module="sleepy_child")
