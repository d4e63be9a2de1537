"""PyTorch's own choice beside the legacy algorithms: comparison table, Pareto frontier
and plain-language verdicts. Pure Python (renders saved JSON without a GPU)."""
from __future__ import annotations

from typing import List, Optional

from tabulate import tabulate

from .records import MIB, AlgoResult, DirectionResult
from .render import fmt_mib, fmt_ms

__all__ = ["render_pytorch", "pareto_frontier", "verdicts"]


def pareto_frontier(rows: List[AlgoResult]) -> List[AlgoResult]:
    """Re-timed, correct rows that no other row beats on both time and workspace,
    by increasing workspace."""
    good = [r for r in rows if r.ok and r.timing is not None and r.correct is not False]
    good.sort(key=lambda r: (r.workspace_bytes, r.timing.median_ms))
    out: List[AlgoResult] = []
    for r in good:
        if not out or r.timing.median_ms < out[-1].timing.median_ms:
            out.append(r)
    return out


def verdicts(d: DirectionResult) -> List[str]:
    """Plain-language findings for one direction."""
    out: List[str] = []
    bench = d.pytorch_pick("benchmark", limit_zero=False) or d.pytorch_pick("benchmark")
    heur = d.pytorch_pick("heuristic")
    best = d.best()
    if bench and heur:
        b, h = bench.steady.median_ms, heur.steady.median_ms
        extra = (bench.first_peak_alloc_bytes or 0) - (heur.first_peak_alloc_bytes or 0)
        cost = (bench.first_call_ms or 0) - (heur.first_call_ms or 0)
        if h / b >= 1.02:
            out.append(f"benchmark mode runs a plan {h / b:.2f}x faster than the heuristic pick "
                       f"({b:.4f} vs {h:.4f} ms per call); it cost {cost:.0f} ms once and "
                       f"{extra / MIB:.0f} MiB of extra peak memory on the first call")
        else:
            out.append(f"benchmark mode found nothing faster than the heuristic pick "
                       f"({b:.4f} vs {h:.4f} ms per call), yet cost {cost:.0f} ms once and "
                       f"{extra / MIB:.0f} MiB of extra peak memory on the first call")
        big = bench.largest_candidate()
        if big and extra > 0:
            ws = big["workspace_bytes"]
            timed = {t for t, _ in bench.timed}
            how = "close to" if abs(extra - ws) <= 0.1 * max(ws, 1) else "compare"
            out.append(
                f"memory: benchmark mode's extra first-call peak ({extra / MIB:.0f} MiB) "
                f"{'matches' if how == 'close to' else 'vs'} the largest candidate workspace, "
                f"{big['tag']} [{', '.join(big['numeric_notes']) or 'no notes'}] at "
                f"{ws / MIB:.0f} MiB"
                + (", a plan that was never timed" if big["tag"] not in timed else ""))
    if bench:
        same = bench.same_kernels_as
        if same:
            out.append(f"PyTorch's benchmark pick {bench.engine_tag} runs the same kernels as "
                       f"{' and '.join(same)}")
        else:
            out.append(f"no legacy algorithm runs the kernels of PyTorch's benchmark pick "
                       f"{bench.engine_tag}")
        if best is not None and best.timing is not None:
            r = best.timing.median_ms / bench.steady.median_ms
            out.append(f"best legacy algorithm {best.algo_name} ({best.math_type}): "
                       f"{best.timing.median_ms:.4f} ms, {r:.2f}x PyTorch's benchmark pick")
    full = d.pytorch_pick("benchmark", limit_zero=True)
    if bench and full and full is not bench:
        same = full.engine_tag == bench.engine_tag
        out.append(
            f"benchmark_limit 0 timed {len(full.timed)} plans instead of {len(bench.timed)}: "
            + ("the same pick" if same else
               f"picked {full.engine_tag} ({full.steady.median_ms:.4f} ms vs "
               f"{bench.steady.median_ms:.4f} ms)")
            + f"; first call {full.first_call_ms:.0f} ms vs {bench.first_call_ms:.0f} ms")
    legacy = d.pytorch_pick("benchmark", api="legacy")
    if legacy:
        out.append(f"PyTorch's legacy path (cudnnFind) ran {legacy.legacy_algo}: "
                   f"{legacy.steady.median_ms:.4f} ms per call")
    front = pareto_frontier(d.find)
    if len(front) > 1:
        fast = front[-1]
        for r, nxt in zip(front, front[1:]):
            out.append(f"a workspace cap below {fmt_mib(nxt.workspace_bytes)} MiB costs "
                       f"+{100 * (r.timing.median_ms / fast.timing.median_ms - 1):.0f}% "
                       f"(best then: {r.algo_name} ({r.math_type}), "
                       f"{r.timing.median_ms:.4f} ms)")
    for p in d.pytorch:
        if p.error:
            out.append(f"{p.label}: not measured: {p.error}")
    return out


def render_pytorch(d: DirectionResult) -> str:
    if not d.pytorch:
        return ""
    rows = []
    times = [p.steady.median_ms for p in d.pytorch if p.ok]
    best = d.best()
    if best is not None and best.timing is not None:
        times.append(best.timing.median_ms)
    fastest = min(times) if times else None

    def gap(t: Optional[float]) -> str:
        return "-" if t is None or not fastest else f"+{100 * (t / fastest - 1):.1f}%"

    for p in d.pytorch:
        if not p.ok:
            rows.append([f"PyTorch: {p.label}", "(failed, see below)"] + ["-"] * 8)
            continue
        what = p.engine_tag or p.legacy_algo or "?"
        if p.api == "engine" and p.mode == "benchmark":
            what += f" (fastest of {len(p.timed)} timed / {len(p.candidates)} candidates)"
        rows.append([f"PyTorch: {p.label}", what, fmt_ms(p.steady.median_ms),
                     gap(p.steady.median_ms), fmt_mib(p.plan_workspace_bytes),
                     {None: "?", True: "yes", False: "no"}[p.deterministic],
                     "-" if p.first_call_ms is None else f"{p.first_call_ms:.1f}",
                     fmt_mib(p.first_peak_alloc_bytes),
                     fmt_mib(p.steady_peak_alloc_bytes), ", ".join(p.same_kernels_as) or "none"])
    if best is not None and best.timing is not None:
        rows.append(["best legacy algorithm (ours)", f"{best.algo_name} ({best.math_type})",
                     fmt_ms(best.timing.median_ms), gap(best.timing.median_ms),
                     fmt_mib(best.workspace_bytes), "yes" if best.deterministic else "no", "-", "-",
                     "-", "-"])
    det = [r for r in d.ranked() if d.rankable(r) and r.deterministic and r.timing]
    if det and det[0] is not best:
        r = det[0]
        rows.append(["best deterministic legacy (ours)", f"{r.algo_name} ({r.math_type})",
                     fmt_ms(r.timing.median_ms), gap(r.timing.median_ms), fmt_mib(r.workspace_bytes),
                     "yes", "-", "-", "-", "-"])
    lines = ["   PyTorch's own choice, each mode in a fresh process (steady-state ms per call, "
             "same timing method; memory: peak allocated above the inputs, output included):"]
    lines.append(tabulate(rows, headers=["who", "what ran", "time (ms)", "vs fastest",
                                         "workspace (MiB)", "determ.", "first call (ms)",
                                         "first-call peak (MiB)", "steady peak (MiB)",
                                         "same kernels as"],
                          tablefmt="simple", disable_numparse=True))
    front = pareto_frontier(d.find)
    if front:
        lines.append("   time vs workspace, legacy (Pareto frontier): " + "; ".join(
            f"{fmt_mib(r.workspace_bytes)} MiB -> {r.algo_name} ({r.math_type}) "
            f"{r.timing.median_ms:.4f} ms" for r in front))
    lines += [f"   - {v}" for v in verdicts(d)]
    return "\n".join(lines)
