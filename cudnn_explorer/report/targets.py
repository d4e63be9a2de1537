"""Text of cuDNN's heuristic rankings for target GPUs (no measurement: every row is a
heuristic ranking, and the header says so)."""
from __future__ import annotations

from typing import Dict, List, Optional

from ..core.problem import ConvProblem
from ..core.targets import DEFAULT_BENCHMARK_LIMIT, TargetRanking
from .format import DIRECTION_TITLES, table, wrap

__all__ = ["render_targets"]


def _cut(name: Optional[str], width: int = 24) -> str:
    if not name:
        return "-"
    return name if len(name) <= width else name[:width - 1] + "~"


def render_targets(problem: ConvProblem, rankings: List[TargetRanking], cudnn: str,
                   benchmark_limit: Optional[int] = None, deterministic: bool = False,
                   measured: Optional[Dict[str, float]] = None) -> str:
    """Per direction, one row per target: cuDNN's top candidate (heuristic mode A), what
    PyTorch would run with benchmark off, how many plans benchmark mode would time, and
    which targets agree. ``measured``: tag -> ms measured on the local GPU, shown where a
    target's pick was measured."""
    limit = DEFAULT_BENCHMARK_LIMIT if benchmark_limit is None else benchmark_limit
    lines = wrap(f"problem: {problem.describe()}")
    lines += wrap(f"HEURISTIC, NOT MEASURED: cuDNN {cudnn}'s deviceless heuristics for each "
                  f"target's device profile (modes A and FALLBACK, in PyTorch's order, "
                  f"filtered by PyTorch's rules); synthesized profiles are marked *")
    seen = {}
    for r in rankings:
        seen.setdefault(r.target, f"{r.target}{'*' if r.synthesized else ''} = {r.device_name}")
    lines += wrap("targets: " + "; ".join(seen.values()))
    for direction in dict.fromkeys(r.direction for r in rankings):
        rows = []
        picks = {}
        for r in (x for x in rankings if x.direction == direction):
            name = r.target + ("*" if r.synthesized else "")
            if not r.ok:
                rows.append([name, r.compute_capability, str(r.sm_count), r.status[:60], "",
                             "", ""])
                continue
            top = r.a[0].name if r.a else None
            pick = r.heuristic_pick(problem.dtype, problem.tf32, deterministic)
            bench = r.benchmark_candidates(problem.dtype, problem.tf32, limit)
            picks[r.target] = pick.name if pick else None
            ms = measured.get(pick.name) if measured and pick else None
            rows.append([name, r.compute_capability, str(r.sm_count), _cut(top), _cut(pick.name if pick else None)
                         + (f" ({ms:.4f} ms)" if ms is not None else ""),
                         f"{len(bench)} of {len(r.candidates())}", ""])
        for row in rows:
            key = row[0].rstrip("*")
            same = [t for t, p in picks.items() if t != key and p and p == picks.get(key)]
            row[-1] = _cut(",".join(same), 22) if same else ("-" if key in picks else "")
        lines.append(f"== {DIRECTION_TITLES.get(direction, direction)} ({direction})")
        lines.append(table(rows, headers=["target", "cc", "SMs", "cuDNN's top (A)",
                                          "PyTorch heuristic pick", "bench times",
                                          "same pick as"]))
        distinct = {p for p in picks.values() if p}
        if len(picks) > 1:
            lines += wrap(f"   {len(distinct)} different heuristic picks across {len(picks)} "
                          f"targets" if len(distinct) > 1 else
                          "   every target gets the same heuristic pick")
    return "\n".join(lines) + "\n"
