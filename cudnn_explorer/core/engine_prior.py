"""What earlier engine workers did, counted once: the configs a restarted worker takes as
done (measure/engines.py), and the EngineSpace of the configs tried before a search
stopped early, which the parent keeps (measure/engine_worker.py). Pure Python.

``prior`` is the parent's record of a direction's search so far: {"attempts": [...],
"failed": [...]}, each entry {"engine", "knobs": [[type, value]], ...}: an attempt's
"config" is the config's record (None: cuDNN rejected it); a failed config has "status"
("hung" or "crashed") and "message". ``listed`` is what a worker said of the search
before its first config (explore_engines' {"listed": ...} event): {"count": engines,
"attempts": candidates per engine, "engines": each engine's entry with no config counted
yet, "heur": {mode: [[engine, knobs], ...]}}."""
from __future__ import annotations

import copy
from typing import Dict, List, Optional, Sequence, Tuple

from .knobs import Knobs, config_tag
from .records import EngineConfig, EngineSpace

__all__ = ["SKIPPED", "key", "heuristic_ranks", "replay", "listed_event", "stopped_space"]

SKIPPED = "skipped"  # a config known to hang, not tried (core/hangs.py)
Heur = Dict[str, List[Tuple[int, Knobs]]]


def key(engine, knobs) -> Tuple[int, Knobs]:
    """A config's engine and knobs as the search keys them (a record's or an event's
    lists of [type, value] made hashable)."""
    return int(engine), tuple(tuple(k) for k in knobs)


def heuristic_ranks(heur: Heur, engine: int, knobs: Knobs) -> Dict[str, int]:
    """The config's 1-based place in each heuristic mode's list that names it."""
    return {m: lst.index((engine, knobs)) + 1 for m, lst in heur.items()
            if (engine, knobs) in lst}


def replay(direction: str, engines: List[dict], prior: Optional[dict],
           heur: Heur) -> Tuple[List[EngineConfig], Dict[int, set]]:
    """What earlier workers did (a restart after a config hung or crashed one of them; in
    a staged search it may have hung in a later round, after its first one was
    recorded): (the configs recorded, each engine's configs done). Counts them into
    ``engines`` (tried, rejected, configs, failed, skipped), as the search that tried
    them did."""
    configs: List[EngineConfig] = []
    done: Dict[int, set] = {e: set() for e in range(len(engines))}
    prior = prior or {}
    failed_before = {key(f["engine"], f["knobs"]) for f in prior.get("failed", [])}
    for a in prior.get("attempts", []):
        e, ch = key(a["engine"], a["knobs"])
        if (e, ch) in failed_before:
            continue
        done[e].add(ch)
        entry = engines[e]
        if a.get("config") is not None and a["config"].get("status") == SKIPPED:
            entry["skipped"] = entry.get("skipped", 0) + 1
            configs.append(EngineConfig.from_dict(a["config"]))
            continue
        entry["tried"] += 1
        if a.get("config") is None:
            entry["rejected"] += 1
        else:
            entry["configs"] += 1
            configs.append(EngineConfig.from_dict(a["config"]))
    for f in prior.get("failed", []):
        e, ch = key(f["engine"], f["knobs"])
        done[e].add(ch)
        configs.append(EngineConfig(tag=config_tag(direction, e, ch), engine=e,
                                    knobs=[list(k) for k in ch], status=f["status"],
                                    message=f["message"],
                                    heuristic_ranks=heuristic_ranks(heur, e, ch)))
        for counter in ("tried", "configs", "failed"):
            engines[e][counter] += 1
    return configs, done


def listed_event(count: int, attempts: int, engines: Sequence[dict], heur: Heur) -> dict:
    """The {"listed": ...} event of a search about to try its first config (see the
    module doc): ``engines`` as listed, before any config is counted."""
    return {"listed": {"count": count, "attempts": attempts,
                       "engines": copy.deepcopy(list(engines)),
                       "heur": {m: [[e, [list(k) for k in ch]] for e, ch in lst]
                                for m, lst in heur.items()}}}


def stopped_space(direction: str, listed: Optional[dict], prior: dict, max_per_engine: int,
                  time_budget_s: Optional[float], sampled: bool,
                  wall_s: float) -> Optional[EngineSpace]:
    """The EngineSpace of the configs tried before a search stopped early (a worker that
    ran out of memory, or too many that hung or crashed), from ``listed`` and ``prior``
    (see the module doc) and the search's limits (as EngineSpace holds them); None when
    no worker had listed the engines, or none had tried a config."""
    if not listed or not (prior.get("attempts") or prior.get("failed")):
        return None
    engines = copy.deepcopy(listed["engines"])
    heur = {m: [key(e, k) for e, k in lst] for m, lst in listed.get("heur", {}).items()}
    configs, _ = replay(direction, engines, prior, heur)
    return EngineSpace(engine_count=int(listed["count"]), engines=engines, configs=configs,
                       max_per_engine=max_per_engine,
                       attempts_per_engine=int(listed["attempts"]),
                       time_budget_s=time_budget_s, wall_s=wall_s, sampled=sampled)
