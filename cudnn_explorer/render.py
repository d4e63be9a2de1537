"""Text tables from records (pure Python; rebuildable from saved JSON without a GPU).

One unit per column, stated in its header; the best row is marked with '*'.
"""
from __future__ import annotations

from typing import List, Optional

from tabulate import tabulate

from .analysis import FIND_DISAGREE, NOISY_SPREAD
from .records import (DIRECTION_TITLES, FIND_CALLS, MIB, DirectionResult, Exploration,
                      fmt_version)

__all__ = ["render_exploration", "render_direction", "render_info", "fmt_mib", "fmt_ms"]

_MATH_ORDER = ["DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"]
_MATH_SHORT = {"DEFAULT_MATH": "DEFAULT", "TENSOR_OP_MATH": "TENSOR_OP",
               "TENSOR_OP_MATH_ALLOW_CONVERSION": "TENSOR_OP_CONV", "FMA_MATH": "FMA"}


def short_status(status: str) -> str:
    return status.replace("CUDNN_STATUS_", "")


def fmt_ms(v: Optional[float]) -> str:
    return "-" if v is None or v < 0 else f"{v:.4f}"


def fmt_mib(b: Optional[int]) -> str:
    """Bytes as MiB with 2 decimals; tiny non-zero sizes are not shown as 0.00."""
    if b is None or b < 0:
        return "-"
    if 0 < b < 0.005 * MIB:
        return "<0.01"
    return f"{b / MIB:.2f}"


def timing_cells(t) -> List[str]:
    """The median (ms) and IQR/median cells of a row's re-timing ("-" if not re-timed)."""
    return [fmt_ms(t.median_ms), f"{100 * t.spread:.1f}%"] if t is not None else ["-", "-"]


def fmt_err(r) -> str:
    if r.output_finite is False:
        return "NaN/Inf"
    if r.max_error is None:
        return "-"
    return f"{r.max_error:.1e}"


def flags(r) -> str:
    """WRONG / noisy / Find disagreement / notes, comma-separated."""
    out = []
    if r.correct is False:
        tol = f"{r.tolerance:.0e}" if r.tolerance is not None else "?"
        out.append(f"WRONG (tol {tol})")
    if r.timing is not None and r.timing.noisy:
        out.append("noisy")
    if r.find_disagrees:
        out.append(f"Find {r.find_ratio:.2f}x")
    if r.timing is not None and r.timing.method != "graph":
        out.append(r.timing.method)
    if r.note:
        out.append(r.note)
    return ", ".join(out)


def render_engines(d: DirectionResult, full: bool) -> str:
    """Engine configs: the summary lines, and with ``full`` the table of every config."""
    from .engines import summary_lines

    sp = d.engines
    if sp is None:
        return ""
    lines = []
    if full:
        rows = []
        ranked = {id(c): i for i, c in enumerate(sp.ranked(), 1)}
        for c in sorted(sp.configs, key=lambda c: (c.time is None, c.time or 0, c.engine)):
            rows.append([
                str(ranked.get(id(c), "-")), c.tag, c.status, *timing_cells(c.timing),
                "-" if c.max_error is None else f"{c.max_error:.1e}",
                fmt_mib(c.workspace_bytes), "-" if c.build_ms is None else f"{c.build_ms:.1f}",
                ",".join(c.numeric_notes) or "-", ",".join(c.behavior_notes) or "-",
                " ".join(f"{m}{k}" for m, k in sorted(c.heuristic_ranks.items())) or "-",
                ("" if c.allowed else "excluded by PyTorch's rules; ")
                + ("WRONG; " if c.correct is False else "") + (c.message[:60] if not c.ok else ""),
            ])
        lines.append(f"   engine configs ({len(sp.configs)}; median ms per launch, same method "
                     "as the legacy rows; build = plan build incl. run-time compilation):")
        lines.append(tabulate(rows, headers=["rank", "tag", "status", "median (ms)", "IQR/med",
                                             "max error", "workspace (MiB)", "build (ms)",
                                             "numeric notes", "behaviour notes",
                                             "heuristic rank", "note"],
                              tablefmt="simple", disable_numparse=True))
    lines += [f"   - {s}" for s in summary_lines(d)]
    return "\n".join(lines)


def render_direction(d: DirectionResult, show_engines: bool = False) -> str:
    title = DIRECTION_TITLES.get(d.direction, d.direction)
    cap = ("" if d.workspace_cap_bytes is None
           else f", capped by --max-workspace {fmt_mib(d.workspace_cap_bytes)} MiB")
    lines = [
        f"== {title} ({d.direction}): {FIND_CALLS.get(d.direction, '')}, descriptor math "
        f"type {d.math_type}",
        f"   workspace given to Find: {fmt_mib(d.workspace_given_bytes)} MiB (largest any "
        f"algorithm and math type asks for: {fmt_mib(d.workspace_needed_bytes)} MiB{cap})",
    ]
    best = d.best()
    timed = any(r.timing is not None for r in d.find)
    checked = any(r.correct is not None for r in d.find)
    roof = timed and d.flops is not None
    headers = ["rank", "algorithm", "math type", "status", "Find (ms)"]
    if timed:
        headers += ["median (ms)", "IQR/med"]
    if roof:
        headers += ["TFLOP/s", "% peak", "GB/s"]
    if checked:
        headers += ["max error"]
    headers += ["workspace (MiB)", "determ.", "heur.", "flags"]
    rows = []
    rank = 0
    for r in d.ranked():
        good = d.rankable(r)
        if good:
            rank += 1
        row = [("*" if r is best else "") + (str(rank) if good else "-"), r.algo_name,
               r.math_type, short_status(r.status), fmt_ms(r.time_ms)]
        if timed:
            row += timing_cells(r.timing)
        if roof:
            tf, pct, gb = d.tflops(r), d.peak_pct(r), d.gbs(r)
            row += ["-" if tf is None or r.timing is None else f"{tf:.1f}",
                    "-" if pct is None or r.timing is None else f"{pct:.1f}",
                    "-" if gb is None or r.timing is None else f"{gb:.0f}"]
        if checked:
            row += [fmt_err(r)]
        hr = d.heuristic_rank(r)
        row += [fmt_mib(r.workspace_bytes), "yes" if r.deterministic else "no",
                "-" if hr is None else str(hr), flags(r)]
        rows.append(row)
    if not any(r[-1] for r in rows):
        headers, rows = headers[:-1], [r[:-1] for r in rows]
    lines.append(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))
    if best is None:
        lines.append("   no algorithm ran successfully for this direction")
    elif best.timing is not None:
        lines.append(f"   * fastest re-timed: {best.algo_name} ({best.math_type}), median "
                     f"{fmt_ms(best.timing.median_ms)} ms (cudnnFind said "
                     f"{fmt_ms(best.time_ms)} ms)")
    else:
        lines.append(f"   * fastest by cudnnFind's own single timing: {best.algo_name} "
                     f"({best.math_type}), {fmt_ms(best.time_ms)} ms")
    if roof:
        lines.append(f"   work: {d.flops / 1e9:.3f} GFLOP, at least "
                     f"{d.min_bytes / 1e6:.1f} MB moved (each input read once, output written "
                     f"once)")
    if d.find_returned >= d.find_requested > 0:
        lines.append(f"   note: Find filled all {d.find_requested} requested rows; "
                     "some may be missing")

    from .render_pytorch import render_pytorch

    pt = render_pytorch(d)
    if pt:
        lines.append(pt)
    en = render_engines(d, show_engines)
    if en:
        lines.append(en)
    heur = ", ".join(
        f"{i}. {h.algo_name} ({_MATH_SHORT.get(h.math_type, h.math_type)})"
        + ("" if h.ok else f" [{short_status(h.status)}]")
        for i, h in enumerate(d.heuristics, 1))
    lines.append(f"   heuristic order (cudnnGet*_v7, no timing): {heur or 'none'}")

    # Workspace matrix: algorithm x math type, MiB, from cudnnGet*WorkspaceSize.
    algos = []
    for w in d.workspace:
        if (w.algo, w.algo_name) not in algos:
            algos.append((w.algo, w.algo_name))
    maths = [m for m in _MATH_ORDER if any(w.math_type == m for w in d.workspace)]
    grid = []
    for algo, name in algos:
        cells = []
        for m in maths:
            b = d.workspace_for(algo, m)
            if b is None:
                st = next((w.status for w in d.workspace
                           if w.algo == algo and w.math_type == m), "")
                cells.append(short_status(st) or "-")
            else:
                cells.append(fmt_mib(b))
        grid.append([name] + cells)
    if grid:
        lines.append("   workspace by algorithm and math type (cudnnGet*WorkspaceSize, MiB):")
        lines.append(tabulate(grid, headers=["algorithm"] + [_MATH_SHORT[m] for m in maths],
                              tablefmt="simple", disable_numparse=True))
    return "\n".join(lines)


def render_exploration(exp: Exploration, show_engines: bool = False) -> str:
    m = exp.measurement
    head = [
        f"cudnn_explorer {exp.tool_version}  (schema {exp.schema} v{exp.schema_version})",
        f"problem: {exp.problem.describe()}",
        f"environment: {exp.environment.describe()}",
        "Find (ms): cudnnFind's own single measurement (a first filter, not a steady-state "
        "time); workspace in MiB (2^20 bytes)",
    ]
    if m.retimed:
        flush = "L2 flushed before every launch" if m.flush_l2 else "L2 not flushed"
        head.append(
            f"median (ms): our steady-state time per launch: warm-up, then CUDA events around "
            f"{'CUDA-graph replays of ' if m.graph else ''}back-to-back launches, "
            f"{m.budget_ms:g} ms of samples per row, {flush}; IQR/med = (p75-p25)/median, "
            f"'noisy' above {100 * NOISY_SPREAD:.0f}%; 'Find Nx' = Find's time / median when "
            f"they differ by more than {100 * FIND_DISAGREE:.0f}%; rows ranked by median")
        head.append("TFLOP/s = 2*MACs / median (padded taps counted); GB/s = minimal bytes / "
                    f"median; % peak: {m.peak_source}")
    if m.reference:
        head.append(f"max error: max|out-ref| / max|ref| against {m.reference}; WRONG above "
                    "the tolerance for the dtype and math type, never ranked best")
    body = [render_direction(d, show_engines) for d in exp.directions]
    from .engines import SUMMARY_HEADERS, summary_rows

    rows = summary_rows(exp)
    if rows:
        body.append("== summary: steady-state median per launch or call (ms), same timing "
                    "method for all\n" + tabulate(rows, headers=SUMMARY_HEADERS,
                                                   tablefmt="simple", disable_numparse=True))
    return "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n"


def render_info(info: dict) -> str:
    """info: {'built': {...}, 'running': {...}, 'gpus': [...], 'gpu_error': str}"""
    b, r = info.get("built", {}), info.get("running", {})
    rows = [
        ["torch", b.get("torch", "-"), r.get("torch", "-")],
        ["cuDNN", fmt_version(b.get("cudnn", "-")) if b.get("cudnn") else "-",
         fmt_version(r.get("cudnn", "-")) if r.get("cudnn") else "-"],
        ["CUDA runtime", b.get("cuda_runtime", "-"), r.get("cuda_runtime", "-")],
    ]
    lines: List[str] = [tabulate(rows, headers=["", "extension built against", "running"],
                                 tablefmt="simple", disable_numparse=True)]
    if r.get("cudnn_torch"):
        lines.append(f"cuDNN as torch reports it: {fmt_version(r['cudnn_torch'])}")
    if r.get("cuda_driver"):
        lines.append(f"CUDA driver: {r['cuda_driver']}")
    for g in info.get("gpus", []):
        lines.append(f"GPU {g['index']}: {g['name']} (compute capability {g['cc']})")
    if not info.get("gpus"):
        lines.append(f"GPU: none usable ({info.get('gpu_error', 'no CUDA device visible')})")
    return "\n".join(lines)
