"""What a caller asks of one direction's engine search beyond the options: the configs it
tries first or alone, those a staged search always keeps, and the legacy rows whose configs
it looks for. Built by the exploration pipeline (measure/pipeline.py) and the model layer's
re-timing (model/run_modes.py), read by measure/engine_worker.py. Pure Python."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

from .records import AlgoResult

__all__ = ["SearchPreferences"]


@dataclass(frozen=True)
class SearchPreferences:
    """One direction's wishes for its engine search (measure/engines.py says how each is
    used). ``legacy_rows``: the direction's legacy rows, whose configs the search looks
    for by the kernels they launch. ``preferred_tags``: PyTorch's pick and the plans it
    timed, tried first, in this order. ``finalist_tags``: the configs that always reach a
    staged search's final round (None: every preferred tag). ``only_preferred`` (without
    sampling): only the preferred tags are tried, a re-timing of given plans."""

    legacy_rows: Sequence[AlgoResult] = ()
    preferred_tags: Sequence[str] = ()
    finalist_tags: Optional[Sequence[str]] = None
    only_preferred: bool = False
