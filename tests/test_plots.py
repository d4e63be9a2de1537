"""Plots, headless, checked through the figure objects: the marks and series each must
show, from the real H200 reference data and a CPU model sweep."""
import os

import pytest

pytest.importorskip("matplotlib")

from conftest import run_cli  # noqa: E402
from cudnn_explorer.core.records import rankable  # noqa: E402
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.core.stats import pareto_front  # noqa: E402
from cudnn_explorer.report import plots  # noqa: E402
from cudnn_explorer.report.format import short_tag  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REF = os.path.join(ROOT, "data", "reference", "h200-default-fp32.json")


def reference():
    with open(REF) as f:
        return Exploration.from_json(f.read())


def test_pareto_front_by_hand():
    pts = [(0, 5.0), (0, 4.0), (1, 4.5), (2, 3.0), (2, 3.5), (8, 1.0), (16, 2.0)]
    assert pareto_front(pts) == [(0, 4.0), (2, 3.0), (8, 1.0)]


def test_pareto_marks_every_row_the_frontier_and_pytorchs_picks():
    exp = reference()
    fig = plots.pareto(exp)
    axes = fig.axes
    assert [ax.get_title() for ax in axes] == ["fwd", "bwd-data", "bwd-filter"]
    for ax, d in zip(axes, exp.directions):
        assert ax.get_xscale() == "symlog" and ax.get_yscale() == "log"
        labels = ax.get_legend_handles_labels()[1]
        bench = d.pytorch_pick("benchmark", api=None)
        assert f"PyTorch's benchmark pick: {short_tag(bench.engine_tag, 28)}" in labels
        assert any(lb.startswith("PyTorch's heuristic pick: ") for lb in labels)
        # every rankable row and config is a point
        n = sum(len(c.get_offsets()) for c in ax.collections
                if c.get_label() in ("legacy algorithms", "engine configs"))
        assert n == sum(rankable(r) for r in d.find) + sum(rankable(c)
                                                           for c in d.engines.configs)
        (front,) = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto frontier"]
        times = [r.time for r in d.find if rankable(r)] + [
            c.time for c in d.engines.configs if rankable(c)]
        assert min(front.get_ydata()) == pytest.approx(min(times))
        star = next(c for c in ax.collections
                    if c.get_label().startswith("PyTorch's benchmark pick"))
        assert star.get_offsets()[0][1] == pytest.approx(d.pick_timing(bench).median_ms)


def test_roofline_has_the_ceiling_and_each_direction():
    exp = reference()
    fig = plots.roofline(exp)
    (ax,) = fig.axes
    labels = ax.get_legend_handles_labels()[1]
    assert any(lb.startswith("ceiling: ") and "GB/s" in lb for lb in labels)
    for d in exp.directions:
        star = next(c for c in ax.collections if c.get_label() == f"{d.direction}: fastest")
        best = min(r.time for r in d.find if rankable(r))
        best = min([best] + [c.time for c in d.engines.configs if rankable(c)])
        assert star.get_offsets()[0][1] == pytest.approx(d.flops / (best * 1e-3) / 1e12)
        assert star.get_offsets()[0][0] == pytest.approx(d.flops / d.min_bytes)


SWEEP = os.path.join(ROOT, "data", "reference", "h200-resnet50-b32-amp-fp16-nhwc.json.gz")


def _sweep():
    from cudnn_explorer.core.files import read_bytes
    from cudnn_explorer.core.model_sweep import ModelSweep

    return ModelSweep.from_json(read_bytes(SWEEP, "sweep"))


def test_gaps_shows_the_top_problem_directions_and_sums_the_rest():
    """The shipped ResNet-50 sweep: the 12 largest gaps a bar each, largest on top, the
    other 56 summed in one; every bar's share of the convolution time and the total in
    the title, all adding up to what the sweep's report says is left."""
    from cudnn_explorer.core.choices import sweep_totals
    from cudnn_explorer.report import sweep_plots

    sw = _sweep()
    totals = sweep_totals(sw)
    fig = sweep_plots.gaps(sw)
    (ax,) = [a for a in fig.axes if a.patches]
    widths = [b.get_width() for b in ax.patches]
    ys = [b.get_y() for b in ax.patches]
    labels = [t.get_text() for t in ax.get_yticklabels()]  # as set: the top first
    assert len(widths) == sweep_plots.TOP + 1 and ys == sorted(ys, reverse=True)
    assert widths[:-1] == sorted(widths[:-1], reverse=True) and min(widths[:-1]) > 0
    assert labels[-1] == "the other 56 problem-directions" and labels[0].startswith("#14 ")
    assert sum(widths) == pytest.approx(totals.pytorch_ms - totals.best_ms)
    data = fig.cudnn_explorer_data
    assert data["left_ms"] == pytest.approx(0.146, abs=5e-4) and data["summed"] == 56
    assert data["bars"][0]["share_of_conv"] == pytest.approx(widths[0] / totals.pytorch_ms)
    assert "leave 0.146 ms per iteration (5.6% of its 2.596 ms" in ax.get_title().replace(
        "\n", " ")
    texts = [t.get_text() for t in ax.texts]
    assert len(texts) == len(widths) and all("% of conv time)" in t for t in texts)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_a_sweeps_roofline_has_one_point_per_problem_direction_under_its_roof():
    from cudnn_explorer.report import sweep_plots

    sw = _sweep()
    fig = sweep_plots.roofline(sw)
    ax = fig.axes[0]
    data = fig.cudnn_explorer_data
    pts = data["points"]
    assert len(pts) == 68 and len({p["name"] for p in pts}) == 68
    assert list(data["roofs"]) == ["FP16 tensor core"]
    for p in pts:
        assert 0 < p["of_roof"] <= 1 and p["best_tflops"] <= p["roof_tflops"]
        assert p["pick_tflops"] <= p["best_tflops"] * (1 + 1e-9)
    best = next(c for c in ax.collections if c.get_label().startswith("best config found"))
    assert len(best.get_offsets()) == 68
    assert [t.get_text() for t in ax.texts][0].startswith("#1 bwd-filter conv1")
    labels = ax.get_legend_handles_labels()[1]
    assert any(lb.startswith("roof: ") and "GB/s" in lb for lb in labels)
    import matplotlib.pyplot as plt

    plt.close(fig)


def test_pareto_legend_is_outside_the_axes_and_the_frontier_spans_them():
    """Inside, the legend covered the points at 0 MiB; a frontier of one point (the
    fastest config needs no workspace) was a single marker: it runs on to the right."""
    exp = reference()
    fig = plots.pareto(exp)
    fig.canvas.draw()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent()
        assert legend.y1 <= ax.get_window_extent().y0  # below the axes
        (front,) = [ln for ln in ax.get_lines() if ln.get_label() == "Pareto frontier"]
        xs = list(front.get_xdata())
        assert xs[0] == 0 and xs[-1] >= 1000  # from no workspace to the largest


def test_cli_writes_png_and_svg_and_refuses_bad_input(tmp_path):
    out = tmp_path / "p"
    r = run_cli("plot", "pareto", REF, "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "p.png").stat().st_size > 10000
    assert (tmp_path / "p.svg").read_text().lstrip().startswith("<?xml")
    import json  # the numbers plotted, beside the figure
    data = json.loads((tmp_path / "p.json").read_text())
    exp = reference()
    fwd = data["directions"]["fwd"]
    assert len(fwd["points"]) == sum(rankable(r) for r in exp.direction("fwd").find) + sum(
        rankable(c) for c in exp.direction("fwd").engines.configs)
    assert fwd["benchmark_pick"][2] == "ConvFwd_eng70_k2=4_k18=0"
    for args, match in [(["plot", "bars", REF], "plot kind 'bars': valid: pareto, roofline"),
                        (["plot", "gaps", REF], "gaps plots a model sweep"),
                        (["plot", "roofline", str(tmp_path / "p.json")], "roofline"),
                        (["plot", "pareto"], "give a saved file"),
                        (["plot", "pareto", str(tmp_path / "none.json")], "none.json'")]:
        r = run_cli(*args)
        assert r.returncode == 2 and match in r.stderr, (args, r.stderr)
        assert "Traceback" not in r.stderr


def test_environments_heatmap_relative_to_the_fastest_pick():
    from test_compare import items, other_env

    ref = reference()
    slow = other_env("ConvFwd_eng1_k2=4_k3=0")  # its fwd pick 1.25x slower, another plan
    fig = plots.environments(items(ref, slow))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "H200 cudnn9.19.0 torch2.11.0", "H200 cudnn9.24.0 torch2.11.0"]
    assert len(ax.get_yticklabels()) == 3
    grid = ax.get_images()[0].get_array()
    fwd = [t.get_text() for t in ax.get_yticklabels()].index(
        next(t.get_text() for t in ax.get_yticklabels() if t.get_text().endswith(" fwd")))
    assert list(grid[fwd]) == pytest.approx([1.0, 1.25])
    texts = [t.get_text() for t in ax.texts]
    assert "eng1_k2=4_k3=0\nx1.25" in texts and any(t.endswith("x1.00") for t in texts)


def test_compare_plot_writes_png_and_svg(tmp_path):
    from test_compare import other_env

    other = tmp_path / "other.json"
    other.write_text(other_env("ConvFwd_eng1_k2=4_k3=0").to_json())
    r = run_cli("compare", "--no-store", "--file", REF, "--file", str(other), "--plot",
                str(tmp_path / "envs"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "envs.png").stat().st_size > 5000 and (tmp_path / "envs.svg").exists()


def test_plot_from_the_store(tmp_path):
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.store.db import Store

    exp = reference()
    db = str(tmp_path / "r.db")
    with Store(db) as store:
        for d in exp.directions:
            store.save(exp.problem, exp.environment,
                       ExploreOptions.from_dict(exp.measurement.options), exp.measurement, d)
    r = run_cli("plot", "roofline", "--store", db, "--out", str(tmp_path / "roof"))
    assert r.returncode == 0, r.stderr
    assert "plotting 2-D convolution: input 32x3x224x224" in r.stderr
    data = __import__("json").loads((tmp_path / "roof.json").read_text())
    assert set(data["directions"]) == {"fwd", "bwd-data", "bwd-filter"}
    for args, match in [(["plot", "pareto", "--store", db, "--pick", "2"], "holds 1 results"),
                        (["plot", "gaps", "--store", db], "needs a saved model sweep"),
                        (["plot", "pareto", REF, "--store", db], "FILE would be ignored"),
                        (["plot", "pareto", REF, "--pick", "2"], "--pick would be ignored")]:
        r = run_cli(*args)
        assert r.returncode == 2 and match in r.stderr, (args, r.stderr)
