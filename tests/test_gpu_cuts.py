"""On the GPU: Note [one-launch cut] in csrc/timing.cpp. A first launch's events less the
host's time to issue it are a lower bound of its GPU time: where that bound is over the
cutoff, the warm launch that a cut after two launches takes is over it too, and the bound
is not above the warm launch's time. Checked on every engine config the heuristics list
and every legacy algorithm of a float32 problem whose slow candidates are tens of
milliseconds (the main job's kind), each launched first in this process, so that module
loading is in the host's part."""
import pytest

from cudnn_explorer.core.options import ExploreOptions, TimingSpec
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.staging import cutoff_ms

# timed against its cutoff: alone on the GPU (other processes' kernels would be in its events)
pytestmark = [pytest.mark.gpu, pytest.mark.gpu_alone]

PROBLEM = dict(shape="16,3,112,112", out_channels=64, kernel=3, padding=1)
BRIEF = TimingSpec(budget_ms=0.5, warmup_ms=0.2, sample_ms=0.1)
# the warm launch may be a little faster than the first one's GPU time (caches); the bound
# may not exceed it by more than this
SLACK, SLACK_MS = 1.10, 0.05


def _options(cutoff: float, confirm: bool):
    from cudnn_explorer.measure import native

    opt = native.timing_options(BRIEF, cutoff, False)
    opt.confirm_cut = confirm
    return opt


def _agrees(t, cutoff: float, what: str, seen: list) -> None:
    """One confirmed timing ``t`` with ``cutoff``: where its first launch alone would have
    cut, its warm launch was over the cutoff, and the bound not above that launch."""
    if t.first_host_ms < 0:
        return
    bound = t.first_ms - t.first_host_ms
    assert t.first_would_cut == (t.first_ms > cutoff and bound > cutoff), what
    if not t.first_would_cut:
        return
    seen.append(what)
    assert t.method == "cut" and len(t.per_launch_ms) == 1, what
    warm = t.per_launch_ms[0]
    assert warm > cutoff, (what, bound, warm, cutoff)
    assert bound <= warm * SLACK + SLACK_MS, (what, bound, warm)


@pytest.mark.parametrize("direction", ["fwd", "bwd-data", "bwd-filter"])
def test_a_one_launch_cut_agrees_with_the_warm_launch(direction):
    from cudnn_explorer.core.knobs import OPERATION_OF, parse_tags
    from cudnn_explorer.core.logs import format_tag
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.legacy import LegacyLab, unique_rows

    p = ConvProblem.create(**PROBLEM)
    lab = LegacyLab(p, direction, ExploreOptions(check=False))
    seen: list = []
    try:
        rows = [r for r in unique_rows(lab.find(None).find) if r.status_code == 0]
        best = min(r.time_ms for r in rows)  # Find's own times: the cutoff's bar
        cut = cutoff_ms(best)
        for r in rows:
            t = native.call("timing", native.load().time_algorithm, direction, lab.native,
                            int(r.algo), r.math_type, _options(cut, True))
            _agrees(t, cut, f"{r.algo_name} ({r.math_type})", seen)
        search = native.engine_search(direction, lab.native)
        names = search.heuristics("A") + search.heuristics("FALLBACK")
        for tag in parse_tags(f"{OPERATION_OF[direction]}_{n}" for n in dict.fromkeys(names)):
            b = search.build(tag.engine, [list(k) for k in tag.knobs])
            if b.status != "built":
                continue
            res = search.measure(b, True, _options(cut, True))
            if res.status == "OK":
                _agrees(res.timing, cut, format_tag(tag), seen)
        # the rule without confirmation: a config cut on its first launch alone keeps the
        # bound as its one sample, and says so by no warm launch
        for tag in parse_tags(f"{OPERATION_OF[direction]}_{n}" for n in names[:40]):
            b = search.build(tag.engine, [list(k) for k in tag.knobs])
            if b.status != "built":
                continue
            res = search.measure(b, True, _options(1e-6, False))
            if res.status == "OK":
                t = res.timing
                assert t.method == "cut" and t.warmup_launches in (0, 1), format_tag(tag)
                if t.warmup_launches == 0:
                    assert t.per_launch_ms == [pytest.approx(t.first_ms - t.first_host_ms)]
    finally:
        lab.close()
    if direction == "bwd-filter":  # its slow configs take tens of ms: the rule must fire
        assert seen, "no candidate's first launch alone was over the cutoff"
