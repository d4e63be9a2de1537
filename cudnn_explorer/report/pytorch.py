"""PyTorch's own choice beside the legacy algorithms: comparison table, Pareto frontier
and plain-language verdicts. Pure Python (renders saved JSON without a GPU)."""
from __future__ import annotations

from typing import List, Optional


from ..core.records import MIB, AlgoResult, DirectionResult
from ..core.stats import pareto_front
from .format import (eager_ms, fmt_err, fmt_mib, fmt_ms, fmt_size, short_algo, short_choice,
                     short_math, short_tag, table, wrap)

__all__ = ["render_pytorch", "pareto_frontier", "verdicts"]


def pareto_frontier(rows: List[AlgoResult]) -> List[AlgoResult]:
    """Re-timed, correct rows that no other row beats on both time and workspace,
    by increasing workspace."""
    good = [r for r in rows if r.ok and r.timing is not None and r.correct is not False]
    return pareto_front(good, key=lambda r: (r.workspace_bytes, r.timing.median_ms))


def verdicts(d: DirectionResult) -> List[str]:
    """Plain-language findings for one direction."""
    out: List[str] = []
    bench = d.pytorch_pick("benchmark")
    heur = d.pytorch_pick("heuristic")
    best = d.best()
    if bench and heur and d.pick_ms(bench) and d.pick_ms(heur):
        b, h = d.pick_ms(bench), d.pick_ms(heur)
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
        elif bench.kernels:  # (a model's run records no kernels: nothing to say then)
            out.append(f"no legacy algorithm runs the kernels of PyTorch's benchmark pick "
                       f"{bench.engine_tag}")
        if best is not None and best.timing is not None and d.pick_ms(bench):
            r = best.timing.median_ms / d.pick_ms(bench)
            out.append(f"best legacy algorithm {best.algo_name} ({best.math_type}): "
                       f"{best.timing.median_ms:.4f} ms, {r:.2f}x PyTorch's benchmark pick")
    full = d.full_search_pick()
    if bench and full:
        same = full.engine_tag == bench.engine_tag
        times = (f" ({fmt_ms(d.pick_ms(full))} ms vs {fmt_ms(d.pick_ms(bench))} ms)")
        out.append(
            f"benchmark_limit 0 timed {len(full.timed)} plans instead of {len(bench.timed)}: "
            + ("the same pick" if same else f"picked {full.engine_tag}{times}")
            + f"; first call {full.first_call_ms:.0f} ms vs {bench.first_call_ms:.0f} ms")
    legacy = d.pytorch_pick("benchmark", api="legacy")
    if legacy:
        out.append(f"PyTorch's legacy path (cudnnFind) ran {legacy.legacy_algo}: "
                   f"{fmt_ms(legacy.time)} ms per call")
    if bench and bench.plan_workspace_bytes is not None and bench.steady_peak_alloc_bytes:
        out.append(f"steady state: PyTorch's benchmark pick peaks at "
                   f"{fmt_size(bench.steady_peak_alloc_bytes)} above its inputs per call "
                   f"(output and workspace included)")
    for p in d.pytorch:
        if p.ok and p.correct is False:
            out.append(f"{p.label}: PyTorch's output is WRONG: max error {fmt_err(p)} > "
                       f"tolerance {p.tolerance:.0e}")
    front = pareto_frontier(d.find)
    if len(front) > 1:
        fast = front[-1]
        for r, nxt in zip(front, front[1:]):
            out.append(f"a workspace cap below {fmt_size(nxt.workspace_bytes)} costs "
                       f"+{100 * (r.timing.median_ms / fast.timing.median_ms - 1):.0f}% "
                       f"(best then: {r.algo_name} ({r.math_type}), "
                       f"{r.timing.median_ms:.4f} ms)")
    for p in d.pytorch:
        if p.error:
            out.append(f"{p.label}: not measured: {p.error}")
    return out


def _label(label: str) -> str:
    return (label.replace(" (benchmark off)", "").replace(" (all)", "")
            .replace("legacy API, benchmark", "legacy API, bench."))[:23]


def render_pytorch(d: DirectionResult) -> str:
    """PyTorch's pick in every mode beside our best legacy rows and best engine config:
    median (CUDA graph) and eager wall time per call, memory, kernels; then findings."""
    if not d.pytorch:
        return ""
    best = d.best()
    engine = d.engines.best(allowed_only=True) if d.engines is not None else None
    times = [d.pick_ms(p) for p in d.pytorch if p.ok and d.pick_ms(p)]
    if best is not None and best.timing is not None:
        times.append(best.timing.median_ms)
    if engine is not None and engine.time:
        times.append(engine.time)
    fastest = min(times) if times else None

    def gap(t: Optional[float]) -> str:
        return "-" if t is None or not fastest else f"+{100 * (t / fastest - 1):.1f}%"

    rows = []
    for p in d.pytorch:
        if not p.ok:
            rows.append([_label(p.label), "(failed, see below)"] + ["-"] * 7)
            continue
        rows.append([_label(p.label), short_choice(p), fmt_ms(d.pick_ms(p)),
                     fmt_ms(eager_ms(d.pick_timing(p))),
                     gap(d.pick_ms(p)), fmt_mib(p.plan_workspace_bytes),
                     {None: "?", True: "yes", False: "no"}[p.deterministic],
                     "-" if p.first_call_ms is None else f"{p.first_call_ms:.1f}",
                     fmt_mib(p.first_peak_alloc_bytes)])
    if best is not None and best.timing is not None:
        rows.append(["best legacy (ours)", short_algo(best.algo_name, best.math_type),
                     fmt_ms(best.timing.median_ms), fmt_ms(eager_ms(best.timing)),
                     gap(best.timing.median_ms), fmt_mib(best.workspace_bytes),
                     "yes" if best.deterministic else "no", "-", "-"])
    det = [r for r in d.ranked() if d.rankable(r) and r.deterministic and r.timing]
    if det and det[0] is not best:
        r = det[0]
        rows.append(["best det. legacy (ours)", short_algo(r.algo_name, r.math_type),
                     fmt_ms(r.timing.median_ms), fmt_ms(eager_ms(r.timing)),
                     gap(r.timing.median_ms),
                     fmt_mib(r.workspace_bytes), "yes", "-", "-"])
    if engine is not None:
        rows.append(["best engine (ours)", short_tag(engine.tag), fmt_ms(engine.time),
                     fmt_ms(eager_ms(engine.timing)), gap(engine.time),
                     fmt_mib(engine.workspace_bytes),
                     "no" if "NONDETERMINISTIC" in engine.numeric_notes else "yes", "-", "-"])
    lines = wrap("   PyTorch's own choice, each mode in a fresh process, timed like our rows (ms "
                 "per call); 1st ms: its first call (benchmark search included), peak MiB: "
                 "peak allocated above the inputs during that call (output included):")
    lines.append(table(rows, headers=["who", "what ran", "median ms", "eager ms",
                                         "vs best", "ws MiB", "det", "1st ms", "peak MiB"]))
    for p in d.pytorch:
        if p.ok and p.api == "engine" and p.mode == "benchmark":
            lines += wrap(f"   {_label(p.label)}: {p.engine_tag}, the fastest of "
                          f"{len(p.timed)} timed of {len(p.candidates)} candidates")
    same = {f"{_label(p.label)}": ", ".join(p.same_kernels_as) for p in d.pytorch
            if p.ok and p.same_kernels_as}
    if same:
        lines += wrap("   same kernels as our legacy rows: " + "; ".join(
            f"{k}: {v}" for k, v in same.items()))
    front = pareto_frontier(d.find)
    if front:
        lines += wrap("   time vs workspace, legacy (Pareto frontier): " + "; ".join(
            f"{fmt_size(r.workspace_bytes)} -> {r.algo_name} ({short_math(r.math_type)}) "
            f"{r.timing.median_ms:.4f} ms" for r in front))
    lines += [ln for v in verdicts(d) for ln in wrap(v, "   - ")]
    return "\n".join(lines)
