"""Identical GPUs compared (a torchrun sweep with --consistency: every rank explored every
problem): per problem-direction, whether PyTorch's benchmark pick and the best engine
config agree across ranks, and where they differ, each plan timed on every rank and what
the choice alone costs. Computed here once; the report formats it. Pure Python."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from .choices import chosen
from .records import DirectionResult
from .model_sweep import ModelSweep

__all__ = ["PlanSpread", "Consistency", "consistency", "tag_ms"]


def tag_ms(dr: DirectionResult, tag: Optional[str]) -> Optional[float]:
    """The steady-state median (ms) of the engine config ``tag`` in one rank's exploration
    of a direction: every rank explores the same candidates, so each rank's pick is timed
    on every other rank too."""
    if not tag:
        return None
    t = dr.config_timing(tag)
    if t is not None:
        return t.median_ms
    own = next((p for p in dr.pytorch if p.ok and p.engine_tag == tag), None)
    return dr.pick_ms(own)  # (a pick re-timed in its own child, not among the configs)


@dataclass(frozen=True)
class PlanSpread:
    """One problem-direction where the ranks chose differently: each distinct plan (in
    the order the ranks chose them) with the ranks that chose it and its median ms on
    every rank; ``spread``: the slowest of these plans over the fastest on one GPU, the
    most over the ranks (what the choice alone costs, with the GPUs' own differences
    taken out), None where no rank timed them all."""

    index: int
    direction: str
    ranks: Dict[Optional[str], List[int]]
    times: Dict[Optional[str], List[Optional[float]]]
    spread: Optional[float]


def _spread(index: int, direction: str, tags: List[Optional[str]],
            drs: Sequence[DirectionResult]) -> PlanSpread:
    ranks: Dict[Optional[str], List[int]] = {}
    for r, tag in enumerate(tags):
        ranks.setdefault(tag, []).append(r)
    times = {tag: [tag_ms(dr, tag) for dr in drs] for tag in ranks}  # [plan][rank]
    worst = [max(ts) / min(ts) - 1 for ts in zip(*times.values()) if None not in ts]
    return PlanSpread(index, direction, ranks, times, max(worst) if worst else None)


@dataclass(frozen=True)
class Consistency:
    """``compared`` problem-directions explored on every rank; on how many the picks and
    the best configs agree; where they differ."""

    ranks: int
    gpus: List[str]
    compared: int = 0
    same_pick: int = 0
    same_best: int = 0
    picks_differ: List[PlanSpread] = field(default_factory=list)
    bests_differ: List[PlanSpread] = field(default_factory=list)


def consistency(sweeps: Sequence[ModelSweep]) -> Consistency:
    """The ranks' sweeps (one per rank, in rank order) compared."""
    if not sweeps:
        return Consistency(0, [])
    cap = sweeps[0].capture
    compared = same_pick = same_best = 0
    picks_differ, bests_differ = [], []
    for i, u in enumerate(cap.problems):
        for d in u.directions:
            drs = []
            for s in sweeps:
                e = s.entry(i)
                drs.append(e.exploration.direction(d) if e and e.exploration else None)
            if any(dr is None for dr in drs):
                continue
            compared += 1
            chosen_by = [chosen(dr) for dr in drs]
            picks = [b.engine_tag if b else None for b, _, _ in chosen_by]
            bests = [eng.tag if eng else None for _, _, eng in chosen_by]
            same_pick += len(set(picks)) == 1
            same_best += len(set(bests)) == 1
            if len(set(picks)) > 1:
                picks_differ.append(_spread(i, d, picks, drs))
            if len(set(bests)) > 1:
                bests_differ.append(_spread(i, d, bests, drs))
    return Consistency(len(sweeps), sorted({s.environment.gpu_name for s in sweeps}),
                       compared, same_pick, same_best, picks_differ, bests_differ)
