"""Plots of a saved model sweep, headless, no GPU needed; each figure carries the numbers
it plots (``cudnn_explorer_data``), which report.plots.save writes beside it.

* ``gaps``: the problem-directions where PyTorch's benchmark picks leave the most time per
  iteration against the best found, the top ``top`` of them and the rest summed in one bar,
  each with its share of the iteration's convolution time, and the total in the title.
* ``roofline``: one point per problem-direction, arithmetic intensity against the TFLOP/s
  of the best config found and of PyTorch's pick, under the GPU's roof for its dtype and
  math type; the distance to the roof is the question, so each point's share of the roof
  colours it and the costliest ones are named.
"""
from __future__ import annotations

from typing import Dict, List

from ..core import analysis
from ..core.choices import sweep_totals
from ..core.model_sweep import ModelSweep
from .plots import _plt, _wrapped

__all__ = ["gaps", "roofline", "TOP"]

TOP = 12  # bars of their own in the gaps plot; the rest are summed in one


def _label(sw: ModelSweep, index: int, direction: str) -> str:
    u = sw.capture.problems[index]
    layer = u.layers[0] + (f" +{len(u.layers) - 1}" if len(u.layers) > 1 else "") \
        if u.layers else ""
    return f"#{index + 1} {direction} {layer}".strip()


def gaps(sw: ModelSweep, title: str = "", top: int = TOP):
    """Horizontal bars, largest first: ms per iteration that PyTorch's benchmark pick of a
    problem-direction leaves against the best config found (pick minus best, times the
    calls per iteration), the ``top`` largest with a bar each and the others summed in
    one; each bar says its share of the iteration's convolution time under PyTorch's
    picks. The title gives the total left and that time."""
    plt = _plt()
    totals = sweep_totals(sw)
    conv_ms = totals.pytorch_ms
    rows = sorted(((r.gap_ms, r.index, r.direction) for r in totals.rows
                   if r.gap_ms is not None), reverse=True)
    left = sum(max(g, 0.0) for g, _, _ in rows)
    shown = [(g, _label(sw, i, d)) for g, i, d in rows[:top] if g > 0]
    rest = rows[len(shown):]
    if rest:
        shown.append((sum(max(g, 0.0) for g, _, _ in rest),
                      f"the other {len(rest)} problem-directions"))
    fig, ax = plt.subplots(figsize=(9.0, 1.6 + 0.32 * max(len(shown), 1)))
    ys = list(range(len(shown)))[::-1]  # the largest on top
    ax.barh(ys, [g for g, _ in shown], color=["tab:red"] * (len(shown) - bool(rest))
            + (["tab:gray"] if rest else []), label="ms per iteration left")
    ax.set_yticks(ys, [name for _, name in shown], fontsize=7)
    share = (lambda g: 100 * g / conv_ms) if conv_ms else (lambda g: float("nan"))
    for y, (g, _) in zip(ys, shown):
        ax.text(g, y, f" {g:.4f} ms ({share(g):.1f}% of conv time)", va="center", fontsize=7)
    ax.set_xlim(0, max([g for g, _ in shown] + [1e-6]) * 1.45)  # room for the texts
    ax.set_xlabel("ms per iteration left by PyTorch's benchmark pick against the best found")
    ax.set_title(_wrapped(title or (
        f"{sw.capture.model.describe()}: PyTorch's benchmark picks leave {left:.3f} ms per "
        f"iteration ({share(left):.1f}% of its {conv_ms:.3f} ms of convolution time, "
        f"{totals.covered} problem-directions); the largest {len(shown) - bool(rest)} "
        f"of them"), 95), fontsize=8)
    fig.tight_layout()
    fig.cudnn_explorer_data = {
        "plot": "gaps", "unit": "ms per iteration", "conv_ms": conv_ms, "left_ms": left,
        "bars": [dict(name=n, ms=g, share_of_conv=share(g) / 100) for g, n in shown],
        "summed": len(rest)}
    return fig


def roofline(sw: ModelSweep, title: str = "", named: int = 6):
    """One point per problem-direction with a best config's time: arithmetic intensity
    (FLOP per byte of the minimum traffic) against the TFLOP/s of the best config found
    (filled, coloured by its share of the roof at that intensity) and of PyTorch's
    benchmark pick (hollow, joined to it), marker area by the time per iteration, under
    each roof the sweep's dtypes and math types need; the ``named`` costliest points are
    labelled."""
    plt = _plt()
    env = sw.environment
    points: List[Dict] = []
    for r in sweep_totals(sw).rows:
        d = r.d
        if not d.flops or not d.min_bytes or r.best_ms is None or r.best_ms <= 0:
            continue
        ai = d.flops / d.min_bytes
        peak = analysis.peak_for(env.gpu_name if env else "", sw.capture.problems[
            r.index].problem.dtype, d.math_type)
        roof = min(peak.tflops, peak.gbs * ai / 1e3) if peak else None
        best = d.flops / (r.best_ms * 1e-3) / 1e12
        pick = d.flops / (r.pick_ms * 1e-3) / 1e12 if r.pick_ms else None
        points.append(dict(name=_label(sw, r.index, r.direction), intensity=ai,
                           best_tflops=best, pick_tflops=pick, roof_tflops=roof,
                           of_roof=best / roof if roof else None,
                           ms_per_iteration=r.best_ms * r.calls,
                           roof=f"{peak.unit}" if peak else None))
    fig, ax = plt.subplots(figsize=(8.5, 5.6))
    roofs = {}
    for r in sweep_totals(sw).rows:
        peak = analysis.peak_for(env.gpu_name if env else "",
                                 sw.capture.problems[r.index].problem.dtype, r.d.math_type)
        if peak is not None:
            roofs[peak.unit] = peak
    if points:
        lo = min(p["intensity"] for p in points) / 3
        hi = max(p["intensity"] for p in points) * 3
        xs = [lo * (4 * hi / lo) ** (k / 60) for k in range(61)]  # to the axis's end
        for unit, peak in sorted(roofs.items()):
            ax.plot(xs, [min(peak.tflops, peak.gbs * x / 1e3) for x in xs], "-", c="black",
                    lw=1, label=f"roof: {peak.tflops:g} TFLOP/s {unit}, {peak.gbs:g} GB/s")
        biggest = max(p["ms_per_iteration"] for p in points)
        sizes = [20 + 180 * p["ms_per_iteration"] / biggest for p in points]
        for p in points:
            if p["pick_tflops"] is not None and p["pick_tflops"] < p["best_tflops"]:
                ax.plot([p["intensity"]] * 2, [p["pick_tflops"], p["best_tflops"]], "-",
                        c="tab:red", lw=0.8, alpha=0.6)
        ax.scatter([p["intensity"] for p in points],
                   [p["pick_tflops"] or p["best_tflops"] for p in points], s=sizes,
                   facecolors="none", edgecolors="tab:red", linewidths=0.8,
                   label="PyTorch's benchmark pick")
        sc = ax.scatter([p["intensity"] for p in points], [p["best_tflops"] for p in points],
                        s=sizes, c=[p["of_roof"] if p["of_roof"] is not None else 0
                                    for p in points], cmap="viridis", vmin=0, vmax=1,
                        edgecolors="black", linewidths=0.4, zorder=5,
                        label="best config found (area: ms per iteration)")
        fig.colorbar(sc, ax=ax, label="best found's share of the roof at its intensity")
        for p in sorted(points, key=lambda q: q["ms_per_iteration"], reverse=True)[:named]:
            share = f", {100 * p['of_roof']:.0f}% of roof" if p["of_roof"] else ""
            ax.annotate(f"{p['name']}{share}", (p["intensity"], p["best_tflops"]),
                        textcoords="offset points", xytext=(8, -11), fontsize=6, zorder=7,
                        bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none",
                                  alpha=0.8))
        ax.set_xlim(lo, hi * 4)  # room for the labels right of the points
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic)")
    ax.set_ylabel("achieved TFLOP/s (steady-state median)")
    ax.legend(fontsize=6, loc="upper left")  # above the roof's slope: no point is there
    gpu = env.gpu_name if env else "?"
    ax.set_title(_wrapped(title or (
        f"{sw.capture.model.describe()} on {gpu}: every problem-direction under the roof "
        f"({len(points)} points; the best config found, and PyTorch's pick below it where "
        f"slower)"), 100), fontsize=8)
    fig.tight_layout()
    fig.cudnn_explorer_data = {
        "plot": "roofline of a sweep", "x": "FLOP per byte of minimum traffic",
        "y": "achieved TFLOP/s", "gpu": gpu,
        "roofs": {u: dict(tflops=p.tflops, gbs=p.gbs) for u, p in roofs.items()},
        "points": points}
    return fig

