"""Timing statistics, FLOP/byte counts, peaks, tolerances and the re-timed ranking."""
import json

import pytest

from cudnn_explorer.core import analysis, stats
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.report.export import rows_from_csv, rows_to_csv
from cudnn_explorer.report.tables import render_exploration

from fakes import retimed_exploration


def test_timing_stats_known_values():
    st = stats.timing_stats([5, 1, 4, 2, 3])
    assert st["median_ms"] == 3 and st["p25_ms"] == 2 and st["p75_ms"] == 4
    assert st["min_ms"] == 1 and st["samples"] == 5 and st["spread"] == pytest.approx(2 / 3)
    with pytest.raises(ValueError):
        stats.timing_stats([])


def test_timing_stats_interpolate_between_samples():
    """Quartiles by linear interpolation between order statistics, worked out by hand:
    for n = 8 sorted samples the 25th percentile sits at rank 1.75 (0-based), the median
    at 3.5 and the 75th percentile at 5.25; order of the input does not matter."""
    v = [10.0, 1.0, 7.0, 3.0, 15.0, 4.0, 2.0, 8.0]  # sorted: 1 2 3 4 7 8 10 15
    st = stats.timing_stats(v)
    assert st["p25_ms"] == pytest.approx(2 + 0.75 * (3 - 2))     # 2.75
    assert st["median_ms"] == pytest.approx(4 + 0.5 * (7 - 4))   # 5.5
    assert st["p75_ms"] == pytest.approx(8 + 0.25 * (10 - 8))    # 8.5
    assert st["min_ms"] == 1.0 and st["samples"] == 8
    assert st["spread"] == pytest.approx((8.5 - 2.75) / 5.5)
    one = stats.timing_stats([0.25])
    assert one["median_ms"] == one["p25_ms"] == one["p75_ms"] == 0.25 and one["spread"] == 0


@pytest.mark.parametrize("spec", [
    dict(shape="32,3,224,224"),
    dict(shape="8,64,56,56", kernel=1, stride=2),
    dict(shape="4,32,14,14", groups=32, out_channels=32),
    dict(shape="2,8,6,10,10", kernel="1,3,3", out_channels=16),
    dict(shape="4,16,50", kernel=5, dilation=2, out_channels=24),
])
def test_flops_match_torch_flop_counter(spec):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    p = ConvProblem.create(**spec)
    x = torch.empty(p.input_shape, device="meta", requires_grad=True)
    w = torch.empty(p.weight_shape, device="meta", requires_grad=True)
    conv = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d,
            3: torch.nn.functional.conv3d}[p.spatial_dims]
    with FlopCounterMode(display=False) as fc:
        y = conv(x, w, stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    fwd = fc.get_total_flops()
    with FlopCounterMode(display=False) as fc:
        y.backward(torch.empty_like(y))
    bwd = fc.get_total_flops()  # data + filter
    for d in ("fwd", "bwd-data", "bwd-filter"):
        assert analysis.flops(p, d) == fwd
    if p.groups == 1:  # torch's counter mis-counts grouped backward (depthwise: ~16x)
        assert bwd == 2 * fwd


def test_min_bytes():
    p = ConvProblem.create("2,4,8,8", out_channels=6, kernel=3, dtype="float16")
    x, w, y = 2 * 4 * 64, 6 * 4 * 9, 2 * 6 * 64
    for d in ("fwd", "bwd-data", "bwd-filter"):
        assert analysis.min_bytes(p, d) == (x + w + y) * 2


def test_tolerances_order():
    t = analysis.tolerance
    assert t("float64", "DEFAULT_MATH") < t("float32", "FMA_MATH") < t("float32", "DEFAULT_MATH")
    assert t("float32", "TENSOR_OP_MATH") == t("float32", "DEFAULT_MATH")
    assert t("float16", "TENSOR_OP_MATH") < t("bfloat16", "DEFAULT_MATH")


def test_peaks():
    pk = analysis.peak_for("NVIDIA H200", "float32", "FMA_MATH")
    assert pk.tflops == 66.9 and pk.unit == "FP32" and pk.gbs == 4800.0
    assert analysis.peak_for("NVIDIA H200", "float32", "DEFAULT_MATH").unit == "TF32 tensor core"
    assert analysis.peak_for("NVIDIA H200", "bfloat16", "TENSOR_OP_MATH").tflops == 989.4
    assert analysis.peak_for("NVIDIA H200", "float16", "FMA_MATH").tflops == 133.8
    assert analysis.peak_for("NVIDIA A100-SXM4-80GB", "float64", "FMA_MATH").tflops == 9.7
    assert analysis.peak_for("Some Future GPU", "float32", "FMA_MATH") is None


def test_ranking_uses_median_and_never_picks_wrong():
    d = retimed_exploration().directions[0]
    names = [r.algo_name for r in d.ranked()]
    assert names[:3] == ["IMPLICIT_PRECOMP_GEMM", "IMPLICIT_GEMM", "GEMM"]
    assert d.best().algo_name == "IMPLICIT_PRECOMP_GEMM"
    gemm = next(r for r in d.find if r.algo_name == "GEMM")
    assert gemm.correct is False and not d.rankable(gemm)
    ipg = d.best()
    assert ipg.find_ratio == pytest.approx(0.283 / 0.210) and ipg.find_disagrees
    assert d.tflops(ipg) == pytest.approx(d.flops / 0.210e-3 / 1e12)
    assert d.peak_pct(ipg) == pytest.approx(100 * d.tflops(ipg) / 494.7)


def test_nonfinite_output_is_wrong():
    d = retimed_exploration().directions[0]
    r = d.best()
    r.output_finite, r.max_error = False, None
    assert r.correct is False and d.best().algo_name == "IMPLICIT_GEMM"


def test_render_retimed_columns_and_flags():
    text = render_exploration(retimed_exploration())
    assert "median ms" in text and "IQR" in text and "%peak" in text
    assert "max err" in text and "eager ms: wall time per call" in text
    best = next(l for l in text.splitlines() if l.startswith("*1"))
    assert "IMPLICIT_PRECOMP_GEMM" in best and "0.2100" in best and "Find 1.3x" in best
    gemm = next(l for l in text.splitlines() if " GEMM " in l and "PRECOMP" not in l
                and "IMPLICIT" not in l)
    assert "WRONG>1e-02" in gemm and gemm.startswith("-")
    noisy = next(l for l in text.splitlines() if "IMPLICIT_GEMM " in l)
    assert "noisy" in noisy
    assert "fastest re-timed: IMPLICIT_PRECOMP_GEMM (TENSOR_OP_MATH), median 0.2100 ms" in text


def test_retimed_json_and_csv_round_trip():
    e = retimed_exploration()
    assert Exploration.from_json(e.to_json()) == e
    rows = rows_from_csv(rows_to_csv(e))
    assert [r["result"] for r in rows] == e.directions[0].ranked()
    assert rows[0]["correct"] == "yes" and float(rows[0]["peak_pct"]) > 0


def test_version_1_files_still_load():
    d = json.loads(retimed_exploration().to_json())
    d["schema_version"] = 1
    del d["measurement"]
    for r in d["directions"][0]["find"]:
        for k in ("timing", "max_error", "tolerance", "output_finite", "peak_tflops",
                  "peak_unit"):
            r.pop(k)
    for k in ("flops", "min_bytes", "find_wall_ms"):
        d["directions"][0].pop(k)
    e = Exploration.from_dict(d)
    assert e.measurement.retimed is False
    assert e.directions[0].best().algo_name == "IMPLICIT_PRECOMP_GEMM"  # by Find time
    assert "median (ms)" not in render_exploration(e)
