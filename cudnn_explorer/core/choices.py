"""The choice rules, computed once for every report and plot: which legacy row is the best
one, what PyTorch chose, which engine config is the best it allows, and, for a model
sweep, what each problem-direction costs per iteration under each choice and what
PyTorch's picks leave on the table. Pure Python (no torch import)."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Dict, List, Optional, Tuple

from .records import DirectionResult
from .model_sweep import ModelSweep

__all__ = ["TIE", "MODES", "best_legacy", "chosen", "DirectionCost", "SweepTotals",
           "sweep_totals"]

TIE = 0.03  # entries within 3% of the fastest are a tie (run-to-run noise is that large)
MODES = ("benchmark", "heuristic", "deterministic")


def best_legacy(d: DirectionResult):
    """(best legacy row, best among PyTorch's legacy candidates): the same row when the
    overall best is not faster beyond a tie (TIE), so a difference is shown only when it
    is one."""
    best, pt = d.best(), d.best(pytorch_only=True)
    if pt is None or best is None or best.time is None or pt.time is None \
            or pt.time <= best.time * (1 + TIE):
        return (pt or best), (pt or best)
    return best, pt


def chosen(d: DirectionResult):
    """(PyTorch's benchmark pick, the best legacy row, the best engine config PyTorch's
    rules allow) of one direction; each None when there is none."""
    legacy, _ = best_legacy(d)
    engine = d.engines.best(allowed_only=True) if d.engines is not None else None
    return d.pytorch_pick("benchmark", api=None), legacy, engine


@dataclass(frozen=True)
class DirectionCost:
    """One problem-direction of a sweep: unique problem ``index``, its DirectionResult
    ``d`` and the ``calls`` one iteration makes; the three choices (chosen()) and their
    steady medians in ms per call, and PyTorch's pick in each mode, derived from ``d``."""

    index: int
    d: DirectionResult
    calls: int

    @cached_property
    def _chosen(self):
        return chosen(self.d)

    @property
    def pick(self):
        return self._chosen[0]

    @property
    def legacy(self):
        return self._chosen[1]

    @property
    def engine(self):
        return self._chosen[2]

    @property
    def pick_ms(self) -> Optional[float]:
        return self.d.pick_ms(self.pick)

    @property
    def legacy_ms(self) -> Optional[float]:
        return self.legacy.time if self.legacy is not None else None

    @property
    def engine_ms(self) -> Optional[float]:
        return self.engine.time if self.engine is not None else None

    @cached_property
    def mode_ms(self) -> Dict[str, Optional[float]]:
        """PyTorch's pick in each mode, ms per call (None: no time)."""
        return {m: self.d.pick_ms(self.d.pytorch_pick(m, api=None)) for m in MODES}

    @property
    def direction(self) -> str:
        return self.d.direction

    @property
    def best_ms(self) -> Optional[float]:
        """The fastest of the three choices, ms per call."""
        found = [t for t in (self.pick_ms, self.legacy_ms, self.engine_ms) if t is not None]
        return min(found) if found else None

    @property
    def gap_ms(self) -> Optional[float]:
        """What PyTorch's benchmark pick leaves against the best found, ms per iteration;
        None without a pick's time."""
        if self.pick_ms is None or self.best_ms is None:
            return None
        return (self.pick_ms - self.best_ms) * self.calls

    @property
    def every_mode_timed(self) -> bool:
        return all(self.mode_ms.get(m) is not None for m in MODES)


@dataclass(frozen=True)
class SweepTotals:
    """A sweep's problem-directions (``rows``, in capture order) and their sums per
    iteration: ``pytorch_ms`` and ``best_ms`` over the ``covered`` rows with a pick's time,
    ``by_mode`` over the ``mode_n`` rows where every mode's pick has a time."""

    rows: List[DirectionCost]
    covered: int
    pytorch_ms: float
    best_ms: float
    mode_n: int
    by_mode: Dict[str, float]

    @property
    def counted(self) -> int:
        return len(self.rows)

    @property
    def left_ms(self) -> float:
        """ms per iteration PyTorch's benchmark picks leave on the table."""
        return self.pytorch_ms - self.best_ms

    def largest_gaps(self, n: int) -> List[Tuple[float, int, str]]:
        """(ms per iteration, problem index, direction) of the ``n`` largest gaps > 0."""
        return sorted(((r.gap_ms, r.index, r.direction) for r in self.rows
                       if r.gap_ms is not None and r.gap_ms > 0), reverse=True)[:n]

    def deterministic_costs(self, n: int) -> List[Tuple[float, int, str]]:
        """Where deterministic mode costs the most over benchmark's pick (ms per
        iteration), the ``n`` largest > 0."""
        costs = [((r.mode_ms["deterministic"] - r.mode_ms["benchmark"]) * r.calls, r.index,
                  r.direction) for r in self.rows if r.every_mode_timed]
        return sorted((c for c in costs if c[0] > 0), reverse=True)[:n]


def sweep_totals(sw: ModelSweep) -> SweepTotals:
    """Every explored problem-direction of ``sw`` with its choices' costs, and their sums."""
    rows: List[DirectionCost] = []
    for i, u in enumerate(sw.capture.problems):
        e = sw.entry(i)
        if e is None or e.exploration is None:
            continue
        for d in e.exploration.directions:
            rows.append(DirectionCost(index=i, d=d, calls=u.calls.get(d.direction, 0)))
    covered = [r for r in rows if r.gap_ms is not None]
    timed = [r for r in rows if r.every_mode_timed]
    return SweepTotals(rows=rows, covered=len(covered),
                       pytorch_ms=sum(r.pick_ms * r.calls for r in covered),
                       best_ms=sum(r.best_ms * r.calls for r in covered), mode_n=len(timed),
                       by_mode={m: sum(r.mode_ms[m] * r.calls for r in timed) for m in MODES})
