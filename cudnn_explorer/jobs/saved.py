"""The jobs that read what was measured before, from the results store and saved files:
the store's history, its explorations (for export and plots), and the results that
compare puts side by side. None measures anything or needs a GPU."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence

from ..core.documents import saved_explorations
from ..core.errors import UserError
from ..core.exploration import Exploration, check_env_filters
from .events import Notify, notifier
from .stores import StoreChoice, existing, without_store

__all__ = ["History", "history", "stored_explorations", "stored_exploration",
           "compare_items"]


@dataclass(frozen=True)
class History:
    """The store at ``path``: ``total`` stored directions; ``rows`` the newest results
    (dicts: created, gpu, cudnn, torch, directions, problem); ``runs`` PyTorch's runs of
    models (created, gpu, mode, model)."""

    path: str
    total: int
    rows: List[Dict[str, str]] = field(default_factory=list)
    runs: List[Dict[str, str]] = field(default_factory=list)


def history(path: Optional[str] = None, limit: int = 50) -> History:
    """What the results store at ``path`` (default: the default file) holds, newest
    first, at most ``limit`` rows of each kind; UserError when there is no store yet."""
    from ..store.db import Store

    named = bool(path)
    path = existing(path)
    with Store(path, named) as store:  # StoreError: exit 3 (2 for a file the user named)
        return History(path, store.count(), store.history(limit), store.model_runs(limit))


def stored_explorations(path: Optional[str] = None, gpus: Sequence[str] = (),
                        cudnns: Sequence[str] = ()) -> List[Exploration]:
    """Every exploration in the store at ``path`` whose environment passes the filters
    (Environment.matches), oldest first."""
    from ..store.db import Store

    with Store(existing(path), bool(path)) as store:
        exps = store.explorations()
    check_env_filters([e.environment for e in exps], gpus, cudnns,
                      f"results store '{existing(path)}'")
    return [e for e in exps if e.environment.matches(gpus, cudnns)]


def stored_exploration(path: Optional[str], n: int = 1) -> Exploration:
    """The ``n``-th most recently measured exploration in the store at ``path``."""
    exps = stored_explorations(path)
    if n > len(exps):
        raise UserError(f"--pick {n}: the store holds {len(exps)} results")
    return exps[-n]


def compare_items(store: StoreChoice, files: Sequence[str] = (), gpus: Sequence[str] = (),
                  cudnns: Sequence[str] = (), notify: Optional[Notify] = None) -> list:
    """(problem, environment, DirectionResult) of every result in the store (when it is
    used and exists) and in the saved ``files`` (one result, an export or a model sweep),
    whose environment passes the filters."""
    from ..store.db import Store, StoreError, default_path

    notify = notifier(notify)
    items = []
    if store.use:
        path = store.path or default_path()
        if store.path and not os.path.exists(path):
            raise UserError(f"--store '{path}': no such file")
        if os.path.exists(path):
            try:
                with Store(path, bool(store.path)) as db:
                    items += [(pr, env, d) for pr, env, d, _ in db.results()]
            except StoreError as e:
                if store.path:  # the store the user named: its error, not an empty answer
                    raise
                without_store(notify, e)
    for f in files:
        for exp in saved_explorations(f, "--file"):
            items += [(exp.problem, exp.environment, d) for d in exp.directions]
    check_env_filters([x[1] for x in items], gpus, cudnns, "compare")
    return [x for x in items if x[1].matches(gpus, cudnns)]
