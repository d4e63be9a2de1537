"""GPU: PyTorch's own choice, identified from its logs, checked against independent evidence
(the kernels it launched, and the kernels of our legacy rows)."""
import pytest

from cudnn_explorer.core.problem import ConvProblem

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def explored():
    import cudnn_explorer

    p = ConvProblem.create("8,64,28,28", out_channels=64, dtype="float16", layout="nhwc")
    return cudnn_explorer.explore(p, budget_ms=10, pytorch=True, child_timeout_s=240)


def test_every_mode_measured_in_every_direction(explored):
    for d in explored.directions:
        assert [p.label for p in d.pytorch] == [
            "benchmark", "benchmark, limit 0 (all)", "heuristics (benchmark off)",
            "deterministic", "legacy API, benchmark"]
        for p in d.pytorch:
            assert p.ok, (d.direction, p.label, p.error)
            assert p.first_call_ms > 0 and p.steady.median_ms > 0 and p.kernels
            assert p.first_peak_alloc_bytes >= 0


def test_engine_winner_is_the_fastest_timed_plan(explored):
    for d in explored.directions:
        for p in d.pytorch:
            if p.api != "engine":
                continue
            tags = [c["tag"] for c in p.candidates]
            assert p.engine_tag in tags
            if p.mode == "benchmark":
                assert p.timed and p.engine_tag == min(p.timed, key=lambda t: t[1])[0]
                if p.benchmark_limit == 0:
                    assert len(p.timed) >= len(d.pytorch[0].timed)
            if p.mode == "deterministic":
                assert p.deterministic is True, p.numeric_notes


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
    from cudnn_explorer import pytorch_pick

    (tmp_path / "sleepy_child.py").write_text("import time\ntime.sleep(30)\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(pytorch_pick.ChildError, match="did not finish within 3 s"):
        pytorch_pick.run_child(ConvProblem.create("1,3,8,8"), ["fwd"],
                               pytorch_pick.ModeSpec("benchmark", "benchmark"), timeout_s=3,
                               child_module="sleepy_child")
