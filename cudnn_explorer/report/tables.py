"""Text tables from records (pure Python; rebuildable from saved JSON without a GPU).

One unit per column, stated in its header; the best row is marked with '*'. Default
output fits 120 columns: long engine tags are cut (format.short_tag); ``--engines``,
``--json`` and ``--csv`` keep them whole.
"""
from __future__ import annotations

from typing import List


from ..core.analysis import FIND_DISAGREE, NOISY_SPREAD
from ..core.records import DirectionResult
from ..core.exploration import Exploration
from ..core.walltime import search_time
from .engines import engines_table, summary_lines, summary_methods, summary_table
from .format import (DIRECTION_TITLES, FIND_CALLS, MATH_ORDER, describe_environment, fmt_err,
                     fmt_mib, fmt_ms, fmt_size, fmt_version, search_time_text, short_math,
                     short_status, table, wrap)
from .pytorch import render_pytorch

__all__ = ["render_exploration", "render_direction", "render_info", "flags", "header_lines"]


def flags(r) -> str:
    """WRONG / noisy / Find disagreement / a timing method other than the one asked for /
    the round a staged search let it go in."""
    out = []
    if r.correct is False:
        tol = f"{r.tolerance:.0e}" if r.tolerance is not None else "?"
        out.append(f"WRONG>{tol}")
    if r.timing is not None and r.timing.noisy:
        out.append("noisy")
    if r.find_disagrees:
        out.append(f"Find {r.find_ratio:.1f}x")
    if r.timing is not None and r.timing.method not in ("graph", "cut"):
        out.append(r.timing.method)  # "cut" is said by the left note
    if getattr(r, "brief_note", ""):
        out.append(r.brief_note)
    if r.ok and r.note:
        out.append(r.note)
    return ", ".join(out)


def render_engines(d: DirectionResult, full: bool) -> List[str]:
    """Engine configs: with ``full`` the table of every config; then the findings."""
    if d.engines is None:
        return []
    lines = [engines_table(d)] if full else []
    return lines + [ln for s in summary_lines(d) for ln in wrap(s, "   - ")]


def render_direction(d: DirectionResult, show_engines: bool = False) -> str:
    title = DIRECTION_TITLES.get(d.direction, d.direction)
    cap = ("" if d.workspace_cap_bytes is None
           else f", capped by --max-workspace {fmt_size(d.workspace_cap_bytes)}")
    searched = d.searched_math_types or [d.math_type]
    others = ", ".join(short_math(m) for m in searched[1:])
    lines = wrap(f"== {title} ({d.direction}): {FIND_CALLS.get(d.direction, '')} under "
                 f"{d.math_type} (PyTorch's)" + (f", then {others}" if others else ""))
    if d.error and not d.find:
        return "\n".join(lines + wrap(f"   not explored: {d.error}"))
    free = ("" if d.workspace_free_bytes is None else
            f"; the GPU had only {fmt_size(d.workspace_free_bytes)} free")
    lines += wrap(f"   workspace given to Find: {fmt_size(d.workspace_given_bytes)} (largest "
                  f"any algorithm and math type asks for: {fmt_size(d.workspace_needed_bytes)}"
                  f"{cap}{free})")
    if d.find_errors:
        lines += wrap(f"   cuDNN refused Find under {'; '.join(d.find_errors)}")
    on_cpu = ["the rows"] if d.reference_on_cpu else []
    if d.engines is not None and d.engines.reference_on_cpu:
        on_cpu.append("the engine configs")
    if on_cpu:
        lines += wrap(f"   accuracy: the float64 reference for {' and '.join(on_cpu)} was "
                      f"computed on the CPU from the same inputs (the GPU had no room for it "
                      f"beside the workspace)")
    if others and any(r.pytorch_candidate is False for r in d.find):
        lines += wrap("   math type+: a row only Find under another math type returned; "
                      f"PyTorch's legacy path (its Find, under {d.math_type}) never sees it")
    best = d.best()
    ran = [r for r in d.ranked() if r.ok]
    timed = any(r.timing is not None for r in ran)
    checked = any(r.correct is not None for r in ran)
    roof = timed and d.flops is not None
    headers = ["#", "algorithm", "math", "Find ms"]
    if timed:
        headers += ["median ms", "IQR"]
    if roof:
        headers += ["TFLOP/s", "%peak"]
    if checked:
        headers += ["max err"]
    headers += ["ws MiB", "det", "heur", "flags"]
    rows = []
    rank = 0
    for r in ran:
        good = d.rankable(r)
        if good:
            rank += 1
        row = [("*" if r is best else "") + (str(rank) if good else "-"), r.algo_name,
               short_math(r.math_type) + ("+" if r.pytorch_candidate is False else ""),
               fmt_ms(r.time_ms)]
        if timed:
            t = r.timing
            row += [fmt_ms(t.median_ms), f"{100 * t.spread:.1f}%"] if t else ["-", "-"]
        if roof:
            tf, pct = d.tflops(r), d.peak_pct(r)
            row += ["-" if tf is None or r.timing is None else f"{tf:.1f}",
                    "-" if pct is None or r.timing is None else f"{pct:.1f}"]
        if checked:
            row += [fmt_err(r)]
        hr = d.heuristic_rank(r)
        row += [fmt_mib(r.workspace_bytes), "yes" if r.deterministic else "no",
                "-" if hr is None else str(hr), flags(r)]
        rows.append(row)
    if rows and not any(r[-1] for r in rows):
        headers, rows = headers[:-1], [r[:-1] for r in rows]
    if rows:
        lines.append(table(rows, headers=headers))
    failed = [r for r in d.find if not r.ok]
    if failed:
        lines += wrap("   did not run: " + "; ".join(
            f"{r.algo_name} ({short_math(r.math_type)}) {short_status(r.status)}"
            + (f", {r.note}" if r.note else "") for r in failed))
    if best is not None and best.timing is not None and d.searched_math_types[1:]:
        pt_best = d.best(pytorch_only=True)
        if pt_best is None:
            lines += wrap(f"   none of PyTorch's legacy candidates ({d.math_type}) ran")
        elif pt_best is not best:
            lines += wrap(f"   best among PyTorch's legacy candidates ({d.math_type}): "
                          f"{pt_best.algo_name} ({pt_best.math_type}), median "
                          f"{fmt_ms(pt_best.time)} ms, {pt_best.time / best.time:.2f}x the "
                          f"fastest row")
    if best is None:
        lines.append("   no algorithm ran successfully for this direction")
    elif best.timing is not None:
        lines += wrap(f"   * fastest re-timed: {best.algo_name} ({best.math_type}), median "
                      f"{fmt_ms(best.timing.median_ms)} ms (cudnnFind said "
                      f"{fmt_ms(best.time_ms)} ms)")
    else:
        lines += wrap(f"   * fastest by cudnnFind's own single timing: {best.algo_name} "
                      f"({best.math_type}), {fmt_ms(best.time_ms)} ms")
    if roof:
        lines += wrap(f"   work: {d.flops / 1e9:.3f} GFLOP, at least {d.min_bytes / 1e6:.1f} MB "
                      f"moved (each input read once, output written once)")
    if d.find_returned >= d.find_requested > 0:
        lines.append(f"   note: Find filled all {d.find_requested} requested rows; "
                     "some may be missing")
    pt = render_pytorch(d)
    if pt:
        lines.append(pt)
    lines += render_engines(d, show_engines)
    if d.error:
        lines += wrap(f"   not finished: {d.error}")
    heur = ", ".join(f"{i}. {h.algo_name} ({short_math(h.math_type)})"
                     + ("" if h.ok else f" [{short_status(h.status)}]")
                     for i, h in enumerate(d.heuristics, 1))
    lines += wrap(f"   heuristic order (cudnnGet*_v7, no timing): {heur or 'none'}")

    # Workspace matrix: algorithm x math type, MiB, from cudnnGet*WorkspaceSize.
    algos = []
    for w in d.workspace:
        if (w.algo, w.algo_name) not in algos:
            algos.append((w.algo, w.algo_name))
    maths = [m for m in MATH_ORDER if any(w.math_type == m for w in d.workspace)]
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
        lines.append(table(grid, headers=["algorithm"] + [short_math(m) for m in maths]))
    return "\n".join(lines)


def _methods(exp: Exploration) -> set:
    """Every timing method the rows of ``exp`` really got (legacy, engines, PyTorch)."""
    out = set()
    for d in exp.directions:
        out |= {r.timing.method for r in d.find if r.timing is not None}
        out |= {p.steady.method for p in d.pytorch if p.steady is not None}
        if d.engines is not None:
            out |= {c.timing.method for c in d.engines.configs if c.timing is not None}
    return out


def header_lines(exp: Exploration) -> List[str]:
    """What the columns mean and how everything was measured: only what is true of the
    rows (each row's own method is checked, not assumed from the options)."""
    m = exp.measurement
    head = [
        f"cudnn_explorer {exp.tool_version}  (schema {exp.schema} v{exp.schema_version})",
        f"problem: {exp.problem.describe()}",
        f"environment: {describe_environment(exp.environment)}",
        "Find ms: cudnnFind's own single measurement (a first filter, not a steady-state "
        "time); ws MiB: workspace (2^20 bytes)",
    ]
    if m.retimed:
        got = _methods(exp)
        how = {"graph": "CUDA-graph replays of back-to-back launches",
               "eager": "back-to-back eager launches (no CUDA graph)",
               "eager+flush": "one launch per sample, L2 flushed before each"}
        if len(got) == 1:
            (g,) = got
            method = f"every timed row (legacy, engine configs, PyTorch): {how.get(g, g)}"
        else:
            method = ("rows differ in method (" + ", ".join(sorted(got)) + "); flags name a "
                      "row's method when it is not graph")
        head.append(
            f"median ms: steady-state time per launch or call: warm-up, then CUDA events around "
            f"samples, {m.budget_ms:g} ms of samples per row; {method}; IQR = (p75-p25)/median, "
            f"'noisy' above {100 * NOISY_SPREAD:.0f}%; 'Find Nx' = Find's time / median when "
            f"they differ by more than {100 * FIND_DISAGREE:.0f}%; rows ranked by median")
        if m.eager_budget_ms:
            head.append(
                f"eager ms: wall time per call of an eager loop (host clock, synchronised at the "
                f"end, {m.eager_budget_ms:g} ms of samples): host cost included, what a caller "
                f"without CUDA graphs pays; for PyTorch its Python call, for our rows the cuDNN "
                f"call from C++")
        elif m.flush_l2:
            head.append("eager ms: not measured with --flush-l2 (an eager loop cannot flush L2 "
                        "between calls without timing the flush)")
        head.append("TFLOP/s = 2*MACs / median (padded taps counted); % peak: "
                    f"{m.peak_source}")
    else:
        head.append("not re-timed (--no-retime): no steady-state times; rows ranked by "
                    "cudnnFind's own time")
    if m.reference:
        head.append(f"max err: max|out-ref| / max|ref| against {m.reference}; WRONG above the "
                    "tolerance for the dtype and math type, never ranked best (PyTorch's "
                    "outputs are checked the same way)")
    return [ln for h in head for ln in wrap(h)]


def render_exploration(exp: Exploration, show_engines: bool = False) -> str:
    body = [render_direction(d, show_engines) for d in exp.directions]
    summary = summary_table(exp)
    if summary:
        methods = summary_methods(exp)
        same = (f"one timing method for all ({', '.join(methods)})" if len(methods) == 1
                else f"timing methods: {', '.join(sorted(methods))}")
        body.append(f"== summary: steady-state median and eager wall time per launch or call "
                    f"(ms), {same}\n" + summary)
    return "\n".join(header_lines(exp)) + "\n\n" + "\n\n".join(body) + "\n"


def _child_wall(c) -> str:
    """"waited 3.1 s for its imports; ran 3.6 s: cuda 0.5, first calls 1.1, ..." (s)."""
    parts = []
    if c.ready_wait_s is not None:
        parts.append(f"waited {c.ready_wait_s:.1f} s for its imports")
    if c.run_s is not None:
        phases = ", ".join(f"{k} {v:.1f}" for k, v in c.phases_s.items())
        rest = c.run_s - sum(c.phases_s.values())
        inside = f": {phases}, the rest (its start and end) {rest:.1f}" if phases else ""
        parts.append(f"ran {c.run_s:.1f} s{inside}")
    return "; ".join(parts) or "not measured"


def wall_lines(exp: Exploration) -> List[str]:
    """Where an exploration's wall time went (s), as far as it recorded it; [] for one
    saved before it did (or answered from the results store)."""
    if exp.wall_s is None:
        return []
    out = [f"wall time: {exp.wall_s:.1f} s"]
    if exp.setup_s is not None:
        out.append(f"  setup (children started; torch imported and CUDA started where "
                   f"not yet; the environment read): "
                   f"{exp.setup_s:.1f} s")
    if exp.pytorch_wall_s is not None:
        out.append(f"  PyTorch's fresh processes (every mode, every direction): "
                   f"{exp.pytorch_wall_s:.1f} s")
    for c in exp.pytorch_children:
        out.append(f"    {c.label}: {_child_wall(c)}")
    for d in exp.directions:
        text = search_time_text(search_time([d]))
        if text:
            out.append(f"  {d.direction}: {text}")
    return out


def render_info(info: dict) -> str:
    """info: {'built': {...}, 'running': {...}, 'gpus': [...], 'gpu_error': str}"""
    b, r = info.get("built", {}), info.get("running", {})
    rows = [
        ["torch", b.get("torch", "-"), r.get("torch", "-")],
        ["cuDNN", fmt_version(b.get("cudnn", "-")) if b.get("cudnn") else "-",
         fmt_version(r.get("cudnn", "-")) if r.get("cudnn") else "-"],
        ["CUDA runtime", b.get("cuda_runtime", "-"), r.get("cuda_runtime", "-")],
    ]
    lines: List[str] = [table(rows, headers=["", "extension built against", "running"])]
    if r.get("cudnn_torch"):
        lines.append(f"cuDNN as torch reports it: {fmt_version(r['cudnn_torch'])}")
    if r.get("cuda_driver"):
        lines.append(f"CUDA driver: {r['cuda_driver']}")
    for g in info.get("gpus", []):
        lines.append(f"GPU {g['index']}: {g['name']} (compute capability {g['cc']})")
    if not info.get("gpus"):  # torch's reason can run to 170 columns: wrapped
        lines += wrap(f"GPU: none usable ({info.get('gpu_error', 'no CUDA device visible')})",
                      "")
    return "\n".join(lines)
