"""Engine configs in text: the per-direction findings, the full table (--engines) and the
closing summary (best legacy algorithm vs best engine config vs PyTorch's pick). Pure."""
from __future__ import annotations

from typing import List, Optional, Tuple


from ..core.choices import TIE, best_legacy
from ..core.exploration import Exploration
from ..core.records import MIB, DirectionResult, Timing
from .format import (eager_ms, fmt_mib, fmt_ms, short_algo, short_choice, short_tag, table,
                     timing_cells)

__all__ = ["summary_lines", "summary_methods", "summary_table", "engines_table"]

def summary_lines(d: DirectionResult) -> List[str]:
    """Findings of one direction's engine exploration, one sentence each."""
    sp = d.engines
    if sp is None:
        return []
    out = []
    best = sp.best(allowed_only=True)
    legacy = d.best()
    bench = d.pytorch_pick("benchmark")
    tried = sum(e.get("tried", 0) for e in sp.engines)
    rejected = sum(e.get("rejected", 0) for e in sp.engines)
    ok = sum(1 for c in sp.configs if c.ok)
    usable = sum(1 for e in sp.engines if e.get("configs", 0))
    failed = sum(e.get("failed", 0) for e in sp.engines)
    skipped = sp.skipped
    out.append(f"engines: {usable} of {sp.engine_count} engines accept this problem; "
               f"{tried} knob configs tried (at most {sp.attempts_per_engine} per engine), "
               f"{rejected} rejected by cuDNN as invalid, {len(sp.configs) - skipped} valid "
               f"(at most {sp.max_per_engine} per engine), {ok} built and ran"
               + (f", {failed} hung or crashed the worker process (recorded, "
                  + ("the search stopped: see 'not finished'" if d.error else
                     "skipped on restart") + ")" if failed else "")
               + (f", {skipped} known to hang not tried (docs/limits.md; the thorough "
                  f"profile tries them)" if skipped else "")
               + ("; time budget exhausted, the rest skipped" if sp.budget_exhausted else "")
               + (f"; explored in {sp.wall_s:.0f} s" if sp.wall_s is not None else ""))
    if sp.rounds:
        out.append(staged_line(sp))
    rtc = [c for c in sp.configs if "RUNTIME_COMPILATION" in c.behavior_notes
           and c.build_ms is not None]
    if rtc:
        slow = max(rtc, key=lambda c: c.build_ms)
        out.append(f"run-time compiled configs: {len(rtc)}, building their plans took "
                   f"{sum(c.build_ms for c in rtc) / 1e3:.1f} s in all (slowest {slow.tag}, "
                   f"{slow.build_ms:.0f} ms), a cost paid once per process by whoever uses them")
    if best is not None:
        notes = f" [{', '.join(best.numeric_notes)}]" if best.numeric_notes else ""
        out.append(f"best engine config: {best.tag}{notes} {best.time:.4f} ms, workspace "
                   f"{best.workspace_bytes / MIB:.2f} MiB")
    if legacy is not None and legacy.timing is not None and best is not None:
        out.append(f"best legacy algorithm: {legacy.algo_name} ({legacy.math_type}) "
                   f"{legacy.timing.median_ms:.4f} ms = {legacy.timing.median_ms / best.time:.2f}x "
                   f"the best engine config's time")
    if bench is not None and bench.engine_tag:
        ours = sp.config(bench.engine_tag)
        if ours is not None and ours.time is not None and bench.time is not None:
            where = (f"found in our list, re-timed {ours.time:.4f} ms vs PyTorch's own "
                     f"{bench.time:.4f} ms")
        elif ours is not None and ours.ok:
            where = "found in our list (not re-timed)"
        else:
            where = "not in our list (" + (ours.status + ": " + ours.message[:80]
                                           if ours is not None else
                                           "cuDNN rejected this config for our graph") + ")"
        out.append(f"PyTorch's benchmark pick {bench.engine_tag}: {where}")
        timed = {t for t, _ in bench.timed}
        if best is not None:
            if best.tag in timed:
                out.append("PyTorch's timed candidates contained the best config")
            else:
                cand = {c.get("tag") for c in bench.candidates}
                why = "a candidate cut by benchmark_limit" if best.tag in cand else \
                    "not among its heuristic + fallback candidates"
                gap = "" if bench.time is None else \
                    f"; its pick is {(bench.time / best.time - 1) * 100:+.0f}% slower"
                out.append(f"PyTorch missed {best.tag} ({why}){gap}")
    for algo, tags in sp.legacy_map.items():
        out.append(f"legacy {algo} runs the kernels of "
                   + (", ".join(tags[:3]) + (f" (+{len(tags) - 3} more)" if len(tags) > 3 else "")
                      if tags else "no engine config we tried"))
    return out


def staged_line(sp) -> str:
    """The staged search's rounds in one sentence (Note [staged search])."""
    parts = []
    for r in sp.rounds:
        took = f" in {r['wall_s']:.1f} s" if r.get("wall_s") is not None else ""
        if r.get("skipped"):  # Note [decided rounds] in core/staging.py
            parts.append(f"round {r['round']} not timed ({r['skipped']})")
        elif r.get("round") == "final":
            parts.append(f"{r['timed']} finalist{'s' * (r['timed'] != 1)} timed with the full "
                         f"{r['budget_ms']:g} ms and checked{took}")
        else:
            parts.append(f"round {r['round']} timed {r['timed']} config"
                         f"{'s' * (r['timed'] != 1)} ({r['budget_ms']:g} ms each){took} and "
                         f"{r['left']} left, more than {r['keep_within']:g}x behind the best")
    return "staged search: " + "; ".join(parts)


def engines_table(d: DirectionResult) -> str:
    """Every engine config tried, fastest first, full tags (--engines; may be wide)."""
    sp = d.engines
    rows = []
    ranked = {id(c): i for i, c in enumerate(sp.ranked(), 1)}
    for c in sorted(sp.configs, key=lambda c: (c.time is None, c.time or 0, c.engine)):
        rows.append([
            str(ranked.get(id(c), "-")), c.tag, c.status, *timing_cells(c.timing),
            fmt_ms(eager_ms(c.timing)),
            "-" if c.max_error is None else f"{c.max_error:.1e}",
            fmt_mib(c.workspace_bytes), "-" if c.build_ms is None else f"{c.build_ms:.1f}",
            ",".join(c.numeric_notes) or "-", ",".join(c.behavior_notes) or "-",
            " ".join(f"{m}{k}" for m, k in sorted(c.heuristic_ranks.items())) or "-",
            ("" if c.allowed else "excluded by PyTorch's rules; ")
            + ("WRONG; " if c.correct is False else "") + (c.message[:60] if not c.ok else "")
            + c.brief_note,
        ])
    return (f"   engine configs ({len(sp.configs)}; median ms per launch, same method as the "
            "legacy rows; eager = wall time per call; build = plan build incl. run-time "
            "compilation):\n"
            + table(rows, headers=["rank", "tag", "status", "median (ms)", "IQR/med",
                                      "eager (ms)", "max error", "workspace (MiB)",
                                      "build (ms)", "numeric notes", "behaviour notes",
                                      "heuristic rank", "note"]))


def _entries(d: DirectionResult) -> List[Tuple[str, str, Optional[Timing]]]:
    """(who, what, timing) of the best legacy algorithm, the best engine config PyTorch's
    rules allow, and PyTorch's benchmark pick at the requested limit."""
    out = []
    legacy, pt_legacy = best_legacy(d)
    if pt_legacy is not legacy:
        out.append(("best legacy, PyTorch's math",
                    short_algo(pt_legacy.algo_name, pt_legacy.math_type), pt_legacy.timing))
    if legacy is not None:
        who = "best legacy algorithm" if pt_legacy is legacy else "best legacy, any math"
        out.append((who, short_algo(legacy.algo_name, legacy.math_type), legacy.timing))
    best = d.engines.best(allowed_only=True) if d.engines is not None else None
    if best is not None:
        cut = " (budget cut)" if d.engines.budget_exhausted else ""
        out.append(("best engine config" + cut, short_tag(best.tag), best.timing))
    bench = d.pytorch_pick("benchmark", api=None)
    if bench is not None:
        out.append(("PyTorch's benchmark pick", short_choice(bench), d.pick_timing(bench)))
    return out


def vs_fastest(t: Optional[float], fastest: Optional[float], all_within: bool) -> str:
    if t is None or not fastest:
        return "-"
    if t <= fastest:
        return f"fastest{' (tie within 3%)' if all_within else ''}"
    return f"{(t / fastest - 1) * 100:+.0f}%"


def summary_methods(exp: Exploration) -> set:
    """The timing methods of the summary's own rows (summary_table), which may be fewer
    than those of every row: a candidate cut in round 1 is never among them."""
    return {t.method for d in exp.directions if d.engines is not None
            for _, _, t in _entries(d) if t is not None}


def summary_table(exp: Exploration) -> str:
    """One block of rows per direction: best legacy algorithm, best engine config and
    PyTorch's benchmark pick, each with its median and eager time; "" when no direction
    explored engine configs."""
    rows = []
    for d in exp.directions:
        if d.engines is None:
            continue
        entries = _entries(d)
        times = [t.median_ms for _, _, t in entries if t is not None]
        fastest = min(times) if times else None
        within = bool(times) and len(times) > 1 and max(times) <= fastest * (1 + TIE)
        for i, (who, what, t) in enumerate(entries):
            med = t.median_ms if t is not None else None
            rows.append([d.direction if i == 0 else "", who, what, fmt_ms(med),
                         fmt_ms(eager_ms(t)), vs_fastest(med, fastest, within)])
    if not rows:
        return ""
    return table(rows, headers=["direction", "who", "what ran", "median (ms)",
                                   "eager (ms)", "vs fastest"])
