"""GPU: the timing options reach every measured path (legacy rows, engine configs,
PyTorch's children), each row says the method it got, and the eager wall time per call
sits beside the median, also for kernels under 20 us."""
import pytest

from cudnn_explorer.core.problem import ConvProblem

pytestmark = pytest.mark.gpu

SMALL = ConvProblem.create("8,32,14,14", out_channels=32, dtype="float16", layout="nhwc")


def _explore(**kw):
    import cudnn_explorer

    return cudnn_explorer.explore(SMALL, directions="fwd", budget_ms=10, engine_configs=1,
                                  engine_budget_s=15, child_timeout_s=120, **kw)


def _methods(exp, left=False):
    """(path, timing) of every timed row; legacy rows and engine configs that left the
    staged search early (timed in its rounds only, without the eager loop) only with
    ``left``."""
    d = exp.directions[0]
    return ([("legacy", r.timing) for r in d.find
             if r.timing and (left or r.left_round is None)]
            + [("engine", c.timing) for c in d.engines.configs
               if c.timing and (left or c.left_round is None)]
            + [("pytorch", p.steady) for p in d.pytorch if p.steady])


@pytest.mark.parametrize("kw,method", [({"flush_l2": True}, "eager+flush"),
                                       ({"graph": False}, "eager")])
def test_every_row_is_timed_by_the_requested_method(kw, method):
    from cudnn_explorer.report.tables import render_exploration

    exp = _explore(**kw)
    rows = _methods(exp)
    assert {w for w, _ in rows} == {"legacy", "engine", "pytorch"}
    # a row or config that left round 1 cut (Note [cut launches]) says "cut" instead
    cut = [t for _, t in _methods(exp, left=True) if t.method == "cut"]
    assert all(t.method == method for _, t in _methods(exp, left=True)
               if t.method != "cut"), [(w, t.method) for w, t in _methods(exp, left=True)]
    assert all(t.method == method for _, t in rows)  # every finalist as asked
    assert all(t.samples == 1 and t.eager is None for t in cut)
    # the first launch is kept apart: every legacy row times one, and a cut needed one
    assert all(t.first_ms is not None and t.first_ms > 0 for t in cut)
    assert all(t.first_ms is not None and t.first_ms > 0 for w, t in rows if w == "legacy")
    assert all((t.eager is None) == (method == "eager+flush") for _, t in rows)
    assert f"one timing method for all ({method})" in render_exploration(exp)


def test_eager_wall_time_beside_the_median_for_tiny_kernels():
    exp = _explore()
    d = exp.directions[0]
    bench = d.pytorch_pick("benchmark")
    best, engine = d.best(), d.engines.best(allowed_only=True)
    for t in (bench.steady, best.timing, engine.timing):
        assert t.method == "graph" and t.eager is not None
        assert t.median_ms < 0.02  # a kernel under 20 us
        assert t.eager.median_ms >= 0.9 * t.median_ms  # host cost only adds
    # PyTorch's Python call costs more per call on the host than its graph replay
    assert bench.steady.eager.median_ms > bench.steady.median_ms
