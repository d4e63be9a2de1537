"""GPU: cuDNN 9 engine configs enumerated, built, timed and checked; PyTorch's pick found."""
import pytest

from cudnn_explorer.problem import ConvProblem

pytestmark = [pytest.mark.gpu, pytest.mark.engines]


@pytest.fixture(scope="module")
def explored():
    import cudnn_explorer

    p = ConvProblem.create("8,64,28,28", out_channels=64, dtype="float16", layout="nhwc")
    import sys

    return cudnn_explorer.explore(
        p, budget_ms=10, pytorch=True, engines=True, engine_max_per_engine=4,
        engine_time_budget_s=30,
        progress=lambda m: print(f"[engines] {m}", file=sys.stderr, flush=True))


def test_engines_enumerated_and_most_configs_accounted_for(explored):
    for d in explored.directions:
        sp = d.engines
        assert sp.engine_count > 10 and len(sp.engines) == sp.engine_count
        assert sp.configs and any(c.ok for c in sp.configs)
        for c in sp.configs:
            assert c.status  # every config reports what happened, never a crash
            if c.ok:
                assert c.timing is not None and c.timing.median_ms > 0
                assert c.correct is True, (c.tag, c.max_error)
        assert any(c.heuristic_ranks for c in sp.configs)


def test_pytorch_pick_is_in_our_list_and_times_agree(explored):
    for d in explored.directions:
        pick = next(p for p in d.pytorch if p.mode == "benchmark" and p.api == "engine"
                    and p.ok)
        ours = d.engines.config(pick.engine_tag)
        assert ours is not None, f"{d.direction}: {pick.engine_tag} not in our list"
        assert ours.ok and abs(ours.time / pick.steady.median_ms - 1) <= 0.10, (
            d.direction, pick.engine_tag, ours.time, pick.steady.median_ms)


def test_every_legacy_algorithm_maps_to_an_engine_config(explored):
    for d in explored.directions:
        for algo, tags in d.engines.legacy_map.items():
            assert tags, f"{d.direction}: {algo} matched no engine config's kernels"
