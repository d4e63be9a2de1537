"""The results store as the jobs use it: opened where asked, closed on every way out; a
store that fails warns once and the job goes on without it (a measurement is never lost
to its store)."""
from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, Optional

from ..core.errors import UserError
from ..core.options import ExploreOptions, flag
from ..core.problem import ConvProblem
from ..core.records import rankable
from .events import Notify

__all__ = ["StoreChoice", "needed_under_torchrun", "opened", "saver", "existing",
           "stored_config_times", "without_store"]


@dataclass(frozen=True)
class StoreChoice:
    """Which store a job uses: ``use`` False (none), else ``path`` (None: the default
    file, ~/.cache/cudnn_explorer/results.db); ``refresh``: measure again even where it
    has the answer, and keep the new one. A job given a plain path or True builds one."""

    path: Optional[str] = None
    use: bool = True
    refresh: bool = False

    @classmethod
    def of(cls, store, refresh: bool = False) -> "StoreChoice":
        """``store`` as the jobs take it: None or False (no store), True (the default
        file), a path, or a StoreChoice."""
        if isinstance(store, StoreChoice):
            return store
        refresh = flag(refresh, "refresh")
        if store is None or store is False:
            return cls(use=False)
        if store is True:
            return cls(refresh=refresh)
        if isinstance(store, (str, os.PathLike)):
            return cls(os.fspath(store), refresh=refresh)
        raise UserError(f"store {store!r}: valid: None, False, True, a path")


def without_store(notify: Notify, e: Exception) -> None:
    notify("warning", f"{e}; going on without the store")


def needed_under_torchrun(choice: StoreChoice) -> None:
    """Under torchrun the ranks' results travel through the results store: a choice of
    none is one line, naming what to give instead."""
    if not choice.use:
        raise UserError("--no-store: under torchrun the ranks' results travel through the "
                        "results store; give --store PATH (on a shared filesystem across "
                        "nodes)")


@contextlib.contextmanager
def opened(choice: StoreChoice, notify: Notify) -> Iterator:
    """The Store ``choice`` names, or None (no store, or one that cannot be used: one
    warning naming the file); closed when the block ends, however it ends."""
    store = None
    if choice.use:
        from ..store.db import Store, StoreError, default_path

        try:
            store = Store(choice.path or default_path())
        except StoreError as e:
            without_store(notify, e)
    try:
        yield store
    finally:
        if store is not None:
            store.close()


def saver(store, problem: ConvProblem, options: ExploreOptions,
          notify: Notify) -> Optional[Callable]:
    """on_direction for explore(): each finished direction into ``store`` at once. A
    direction that did not finish (its ``error``: out of memory, a GPU fault, engine
    configs lost) is not kept: the store would answer later runs with a fault of this
    moment, so the next run measures it again. A store that fails is dropped after one
    warning; the measurement goes on."""
    if store is None:
        return None
    from ..store.db import StoreError

    state = {"ok": True}

    def save(env, measurement, d):
        if state["ok"] and not d.error:
            try:
                store.save(problem, env, options, measurement, d)
            except StoreError as e:
                state["ok"] = False
                without_store(notify, e)
    return save


def existing(path: Optional[str]) -> str:
    """The store file to read (``path``, else the default one); UserError when there is
    none yet (reading must not create it)."""
    from ..store.db import default_path

    path = path or default_path()
    if not os.path.exists(path):
        raise UserError(f"--store '{path}': no such file (nothing measured yet)")
    return path


def stored_config_times(choice: StoreChoice, problem: ConvProblem,
                        notify: Notify) -> Dict[str, Dict[str, float]]:
    """Per GPU name, engine config (without its operation prefix) -> steady-state median
    ms of ``problem``'s stored results, the latest measurement of each; {} without a
    store. Read only: a missing store file is not created."""
    if not choice.use:
        return {}
    from ..store.db import StoreError, default_path

    if not os.path.exists(choice.path or default_path()):
        return {}
    out: Dict[str, Dict[str, float]] = {}
    with opened(choice, notify) as store:
        if store is None:
            return {}
        try:
            rows = sorted(store.results(), key=lambda r: r[3])  # oldest first: latest wins
        except StoreError as e:
            without_store(notify, e)
            return {}
    for p, env, d, _ in rows:
        if p != problem or d.engines is None:
            continue
        for c in d.engines.configs:
            if rankable(c):
                out.setdefault(env.gpu_name, {})[c.tag.split("_", 1)[1]] = c.time
    return out
