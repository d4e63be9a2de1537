"""The targets job: cuDNN's heuristic rankings for other GPUs, from their device profiles,
for one problem or every unique problem of a capture. Nothing is measured and no GPU is
needed (cuDNN's deviceless heuristics)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from ..core.capture import Capture
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.targets import DeviceProfile, TargetRanking
from .events import Notify, notifier
from . import lazy_measure
from .stores import StoreChoice, stored_config_times

__all__ = ["TargetRankings", "ModelTargetRankings", "rank_targets", "rank_capture"]


@dataclass(frozen=True)
class TargetRankings:
    """One problem's rankings, per (target, direction), under ``cudnn`` (cuDNN's version
    as an integer string); ``measured``: per GPU name, engine config -> our stored steady
    median ms of this problem, for the configs that were measured."""

    problem: ConvProblem
    rankings: List[TargetRanking]
    cudnn: str
    benchmark_limit: Optional[int]
    measured: Dict[str, Dict[str, float]]

    @property
    def all_failed(self) -> bool:
        return bool(self.rankings) and not any(r.ok for r in self.rankings)


@dataclass(frozen=True)
class ModelTargetRankings:
    """Per unique problem of ``capture`` (in order), its rankings per target."""

    capture: Capture
    rankings: List[List[TargetRanking]]
    cudnn: str


def _cudnn() -> str:
    return lazy_measure.measuring().native.runtime_info().get("cudnn", "")


def rank_targets(problem: ConvProblem, profiles: Sequence[DeviceProfile],
                 options: Optional[ExploreOptions] = None, store=None,
                 notify: Optional[Notify] = None) -> TargetRankings:
    """``problem``'s heuristic rankings on every profile, for ``options.directions``;
    with ``store``, our measured times of the configs it holds beside them."""
    options = options or ExploreOptions.create()
    lazy_measure.measuring()
    from ..measure.deviceless import rank_targets as rank

    rankings = rank(problem, options.directions, list(profiles))
    return TargetRankings(problem, rankings, _cudnn(), options.benchmark_limit,
                          stored_config_times(StoreChoice.of(store), problem,
                                              notifier(notify)))


def rank_capture(capture: Capture, profiles: Sequence[DeviceProfile]) -> ModelTargetRankings:
    """Every unique problem of ``capture``, in the directions the model runs, ranked on
    every profile."""
    lazy_measure.measuring()
    from ..measure.deviceless import rank_many

    rankings = rank_many([(u.problem, u.directions) for u in capture.problems], list(profiles))
    return ModelTargetRankings(capture, rankings, _cudnn())
