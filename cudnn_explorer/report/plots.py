"""Plots of saved results, headless (matplotlib's Agg backend), no GPU needed.

Each function returns a matplotlib Figure whose artists carry labels (the tests read them);
``save`` writes it as PNG and SVG.

* ``pareto``: per direction of an exploration, steady-state median against workspace
  (log axis above 0.01 MiB), every successful legacy row and engine config, the Pareto
  frontier, and PyTorch's benchmark and heuristic picks marked.
* ``roofline``: per direction, arithmetic intensity (FLOPs per byte of the minimum traffic)
  against achieved TFLOP/s of each row, under the GPU's arithmetic and memory ceilings.
* ``environments``: problems x environments, colour = the time of each environment's
  PyTorch benchmark pick relative to the fastest pick among the environments, each cell
  naming the plan (or algorithm) picked.

A model sweep's plots (gaps, and a roofline of all its problems) are in report/sweep_plots.py.
"""
from __future__ import annotations

import os
from typing import List, Optional, Tuple

from ..core import analysis
from ..core.stats import pareto_front
from ..core.records import DirectionResult, rankable
from ..core.exploration import Exploration
from .format import short_tag

__all__ = ["pareto", "roofline", "environments", "save"]

MIB = 2**20


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _points(d: DirectionResult) -> List[Tuple[float, float, str, str]]:
    """(workspace MiB, median ms, kind, name) of every rankable legacy row and engine
    config."""
    pts = [(r.workspace_bytes / MIB, r.time, "legacy", f"{r.algo_name} ({r.math_type})")
           for r in d.find if rankable(r)]
    if d.engines is not None:
        pts += [(c.workspace_bytes / MIB, c.time, "engine", c.tag)
                for c in d.engines.configs if rankable(c)]
    return pts


def _pick_point(d: DirectionResult, mode: str) -> Optional[Tuple[float, float, str]]:
    p = d.pytorch_pick(mode, api=None)
    if p is None:
        return None
    t = d.pick_timing(p)
    cfg = d.engines.config(p.engine_tag) if d.engines is not None and p.engine_tag else None
    ws = p.plan_workspace_bytes if p.plan_workspace_bytes is not None else (
        cfg.workspace_bytes if cfg is not None else None)
    if t is None or ws is None:
        return None
    return ws / MIB, t.median_ms, p.engine_tag or p.legacy_algo or "?"


def pareto(exp: Exploration, title: str = ""):
    plt = _plt()
    dirs = [d for d in exp.directions if _points(d)]
    fig, axes = plt.subplots(1, max(len(dirs), 1), figsize=(5 * max(len(dirs), 1), 5.4),
                             squeeze=False)
    data = {"plot": "pareto", "x": "workspace MiB", "y": "steady-state median ms",
            "directions": {}}
    for ax, d in zip(axes[0], dirs):
        pts = _points(d)
        data["directions"][d.direction] = {
            "points": [dict(workspace_mib=p[0], median_ms=p[1], kind=p[2], name=p[3])
                       for p in pts],
            "frontier": pareto_front([(p[0], p[1]) for p in pts]),
            "benchmark_pick": _pick_point(d, "benchmark"),
            "heuristic_pick": _pick_point(d, "heuristic")}
        for kind, colour in (("legacy", "tab:blue"), ("engine", "tab:gray")):
            xs = [p[0] for p in pts if p[2] == kind]
            ys = [p[1] for p in pts if p[2] == kind]
            if xs:
                ax.scatter(xs, ys, s=12, c=colour, alpha=0.6,
                           label="legacy algorithms" if kind == "legacy" else "engine configs")
        front = pareto_front([(p[0], p[1]) for p in pts])
        # the frontier runs on to the largest workspace: nothing there is faster than its
        # last point (a frontier of one point, configs that need no workspace, is a line too)
        right = max(max(p[0] for p in pts), 1.0)
        ax.plot([f[0] for f in front] + [right], [f[1] for f in front] + [front[-1][1]],
                "-", c="tab:green", lw=1.5, drawstyle="steps-post", zorder=4,
                label="Pareto frontier")
        ax.scatter([f[0] for f in front], [f[1] for f in front], s=60, facecolors="none",
                   edgecolors="tab:green", linewidths=1.5, zorder=4)
        # the heuristic pick as a hollow diamond, the benchmark pick's star drawn inside it
        for mode, marker, size, face, name in (
                ("heuristic", "D", 160, "none", "PyTorch's heuristic pick"),
                ("benchmark", "*", 90, "tab:red", "PyTorch's benchmark pick")):
            pick = _pick_point(d, mode)
            if pick is not None:
                ax.scatter([pick[0]], [pick[1]], s=size, marker=marker, facecolors=face,
                           edgecolors="tab:red" if face == "none" else "black", zorder=6,
                           linewidths=1.5, label=f"{name}: {short_tag(pick[2], 28)}")
        ax.set_xscale("symlog", linthresh=0.01)
        ax.set_yscale("log")
        ax.set_xlabel("workspace (MiB; log above 0.01)")
        ax.set_ylabel("steady-state median (ms, log)")
        ax.set_title(d.direction)
        # below the axes: inside, it covered the points at 0 MiB, where the fast ones are
        ax.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=1,
                  frameon=False)
    fig.suptitle(_wrapped(title or _describe(exp), 40 * max(len(dirs), 1)), fontsize=8)
    fig.tight_layout()
    fig.cudnn_explorer_data = data
    return fig


def roofline(exp: Exploration, title: str = ""):
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    env = exp.environment
    p = exp.problem
    ceiling = None
    colours = {"fwd": "tab:blue", "bwd-data": "tab:orange", "bwd-filter": "tab:green"}
    intensities = []
    data = {"plot": "roofline", "x": "FLOP per byte of minimum traffic",
            "y": "achieved TFLOP/s", "directions": {}}
    for d in exp.directions:
        if not d.flops or not d.min_bytes:
            continue
        ai = d.flops / d.min_bytes
        intensities.append(ai)
        ts = [t for _, t, _, _ in _points(d)]
        if ts:
            tf = [d.flops / (t * 1e-3) / 1e12 for t in ts]
            data["directions"][d.direction] = {"intensity": ai, "tflops": tf}
            ax.scatter([ai] * len(tf), tf, s=10, alpha=0.5, c=colours.get(d.direction),
                       label=f"{d.direction}: {len(tf)} rows and configs")
            ax.scatter([ai], [max(tf)], s=80, marker="*", c=colours.get(d.direction),
                       edgecolors="black", zorder=5, label=f"{d.direction}: fastest")
        peak = analysis.peak_for(env.gpu_name, p.dtype, d.math_type)
        ceiling = ceiling or peak
    if ceiling is not None and intensities:
        lo, hi = min(intensities) / 10, max(intensities) * 10
        xs = [lo * (hi / lo) ** (k / 50) for k in range(51)]
        data["ceiling"] = {"tflops": ceiling.tflops, "unit": ceiling.unit, "gbs": ceiling.gbs}
        ax.plot(xs, [min(ceiling.tflops, ceiling.gbs * x / 1e3) for x in xs], "-", c="black",
                label=f"ceiling: {ceiling.tflops:g} TFLOP/s {ceiling.unit}, "
                      f"{ceiling.gbs:g} GB/s")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP per byte of minimum traffic)")
    ax.set_ylabel("achieved TFLOP/s (steady-state median)")
    ax.legend(fontsize=6)
    ax.set_title(_wrapped(title or _describe(exp), 90), fontsize=7)
    fig.tight_layout()
    fig.cudnn_explorer_data = data
    return fig


def environments(items, title: str = ""):
    """``items`` as compare takes them: (problem, environment, DirectionResult)."""
    from .compare import shared_groups

    plt = _plt()
    shared, envs = shared_groups(items)
    used = sorted({e for v in shared.values() for e in v})
    rows, names = [], []
    for (problem, direction), by_env in shared.items():
        cells = []
        for e in used:
            d = by_env.get(e)
            pick = d.pytorch_pick("benchmark", api=None) if d is not None else None
            what = (pick.engine_tag or pick.legacy_algo or "?") if pick else "-"
            cells.append((d.pick_ms(pick) if d is not None else None, short_tag(what, 16)))
        rows.append(cells)
        names.append(f"{problem.describe()[:48]} {direction}")
    grid = []
    for cells in rows:
        ts = [t for t, _ in cells if t is not None]
        best = min(ts) if ts else None
        grid.append([t / best if t is not None and best else float("nan") for t, _ in cells])
    fig, ax = plt.subplots(figsize=(2.0 + 2.2 * max(len(used), 1), 1.2 + 0.45 * max(len(rows), 1)))
    im = ax.imshow(grid if grid else [[float("nan")]], cmap="RdYlGn_r", vmin=1.0, vmax=1.5,
                   aspect="auto")
    for y, cells in enumerate(rows):
        for x, (t, what) in enumerate(cells):
            ratio = grid[y][x]
            ax.text(x, y, f"{what}\n{'x%.2f' % ratio if t is not None else 'no pick'}",
                    ha="center", va="center", fontsize=6)
    ax.set_xticks(range(len(used)), used, fontsize=6, rotation=15)
    ax.set_yticks(range(len(rows)), names, fontsize=6)
    fig.colorbar(im, ax=ax, label="PyTorch's pick: time / fastest environment's pick")
    ax.set_title(_wrapped(title or "PyTorch's benchmark pick per environment", 90), fontsize=8)
    fig.tight_layout()
    fig.cudnn_explorer_data = {
        "plot": "environments", "value": "pick's median / fastest environment's pick",
        "environments": used, "rows": names,
        "cells": [[dict(median_ms=t, pick=w) for t, w in cells] for cells in rows]}
    return fig


def _wrapped(text: str, width: int) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, width))


def _describe(exp: Exploration) -> str:
    p = exp.problem
    return f"{p.describe()}, {exp.environment.gpu_name}, cuDNN {exp.environment.cudnn_runtime}"


def save(fig, out: str) -> List[str]:
    """Write ``fig`` as OUT.png and OUT.svg (OUT without its .png/.svg suffix), and the
    numbers it plots as OUT.json, so that it can be checked and redrawn."""
    import json

    base, ext = os.path.splitext(out)
    if ext.lower() not in (".png", ".svg"):
        base = out
    paths = [base + ".png", base + ".svg"]
    fig.savefig(paths[0], dpi=120)
    fig.savefig(paths[1])
    data = getattr(fig, "cudnn_explorer_data", None)
    if data is not None:
        paths.append(base + ".json")
        with open(paths[2], "w") as f:
            json.dump(data, f, indent=1)
    _plt().close(fig)
    return paths
