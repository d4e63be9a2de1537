"""Benchmark mode's lottery: how often each plan was PyTorch's pick over repeated fresh
processes, and what the difference between those plans costs. Pure Python."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .model_run import ModelRun
from .schema import Record

__all__ = ["Stability", "plan_counts", "pick_stability"]


@dataclass
class Stability(Record):
    """One problem and direction over repeated fresh processes with benchmark on: how often
    each plan was PyTorch's pick (``counts``), and each plan's steady-state median re-timed
    here (``times``, ms; absent when it could not be timed)."""

    problem: int
    direction: str
    counts: Dict[str, int] = field(default_factory=dict)
    times: Dict[str, float] = field(default_factory=dict)

    @property
    def stable(self) -> bool:
        return len(self.counts) <= 1

    @property
    def spread(self) -> Optional[float]:
        """slowest / fastest - 1 among the plans picked, or None (fewer than two timed)."""
        ts = [self.times[t] for t in self.counts if t in self.times]
        return max(ts) / min(ts) - 1 if len(ts) >= 2 and min(ts) > 0 else None


def plan_counts(repeats: ModelRun) -> List[Tuple[int, str, Dict[str, int]]]:
    """Per problem and direction, (problem, direction, plan -> how many of the repeated
    runs picked it), from the first calls of the first input size of each run (each a
    fresh process), in problem order, the most picked plan first."""
    counts: Dict[Tuple[int, str], Dict[str, int]] = {}
    for m in repeats.modes:
        if not m.ok:
            continue
        for c in m.sizes[0].calls:
            if c.problem >= 0 and c.plan:
                per = counts.setdefault((c.problem, c.direction), {})
                per[c.plan] = per.get(c.plan, 0) + 1
    order = {"fwd": 0, "bwd-data": 1, "bwd-filter": 2}
    return [(p, d, dict(sorted(v.items(), key=lambda kv: -kv[1])))
            for (p, d), v in sorted(counts.items(), key=lambda kv: (kv[0][0],
                                                                    order[kv[0][1]]))]


def pick_stability(repeats: ModelRun) -> List[Stability]:
    """plan_counts as Stability records, none of their plans re-timed."""
    return [Stability(p, d, c) for p, d, c in plan_counts(repeats)]
