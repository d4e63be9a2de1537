"""Where explorations spent their wall time, summed over directions: the legacy rows
(their tensors and float64 reference, Find, each round of a staged search among them, and
the checks against the reference within those), the engine configs (their plan builds,
each round of a staged search, the checks within them), and how many configs each round
let go. Pure:
read from the records each direction keeps (DirectionResult's walls and legacy rounds,
EngineSpace's rounds and configs), so a saved exploration or sweep gives the same figures
as the run that made it."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, List, Optional, Tuple

from .records import DirectionResult

__all__ = ["SearchTime", "search_time", "sweep_search_time"]

# A staged search's round names as reports say them.
_ROUND_NAMES = {1: "round 1", 2: "round 2", "final": "finalists"}


@dataclass(frozen=True)
class SearchTime:
    """Seconds of wall time over ``directions`` explored directions; None where no
    direction recorded that part (a saved result from before it was recorded, or an
    exploration without engine configs). ``rounds``: (name, seconds) in order (round 1's
    include listing and building the configs); ``left``: (round name, configs that left
    there), then ("finalists", configs timed in full); ``ahead_s``: listing and plan
    builds done ahead, during the legacy rows (in builds_s, not in engines_s);
    ``legacy_rounds``: (name, seconds) of the legacy rows' staged search, in order (in
    legacy_s, Find not in them). ``setup_s``: the legacy rows' tensors and reference (in
    legacy_s); ``legacy_checks_s``, ``engine_checks_s``: the checks against the reference
    (within the legacy rows' and the engine configs' times, their rounds')."""

    directions: int = 0
    legacy_s: Optional[float] = None
    find_s: Optional[float] = None
    engines_s: Optional[float] = None
    builds_s: Optional[float] = None
    configs: int = 0
    rounds: Tuple[Tuple[str, float], ...] = ()
    left: Tuple[Tuple[str, int], ...] = ()
    ahead_s: Optional[float] = None
    legacy_rounds: Tuple[Tuple[str, float], ...] = ()
    setup_s: Optional[float] = None
    legacy_checks_s: Optional[float] = None
    engine_checks_s: Optional[float] = None

    @property
    def measured_s(self) -> Optional[float]:
        """The legacy rows' and engine configs' seconds together (None: neither known)."""
        parts = [s for s in (self.legacy_s, self.engines_s) if s is not None]
        return sum(parts) if parts else None


def _add(total: Optional[float], value: Optional[float]) -> Optional[float]:
    return total if value is None else (total or 0.0) + value


def search_time(directions: Iterable[DirectionResult]) -> SearchTime:
    """The SearchTime of ``directions`` (of one exploration or of many)."""
    n, legacy, find, engines, builds, ahead, configs = 0, None, None, None, None, None, 0
    setup, legacy_checks, engine_checks = None, None, None
    round_s, left = {}, {}  # in the rounds' order, as each direction records them
    legacy_round_s: dict = {}
    for d in directions:
        n += 1
        legacy = _add(legacy, d.legacy_wall_s)
        setup = _add(setup, d.legacy_setup_s)
        legacy_checks = _add(legacy_checks, d.legacy_checks_s)
        _sum_rounds(d.legacy_rounds, legacy_round_s)
        if d.find_wall_ms_all is not None:
            find = _add(find, d.find_wall_ms_all / 1e3)
        engines = _add(engines, d.engines_wall_s)
        sp = d.engines
        if d.engines_wall_s is None or sp is None:
            continue
        builds = _add(builds, sum(c.build_ms or 0 for c in sp.configs) / 1e3)
        checked = [c.check_ms for c in sp.configs if c.check_ms is not None]
        if checked:  # none: not checked, or a saved result from before they were recorded
            engine_checks = _add(engine_checks, sum(checked) / 1e3)
        ahead = _add(ahead, sp.ahead_s)
        configs += len(sp.configs) - sp.skipped  # configs the search built
        _sum_rounds(sp.rounds, round_s, left)
    return SearchTime(directions=n, legacy_s=legacy, find_s=find, engines_s=engines,
                      builds_s=builds, configs=configs, rounds=tuple(round_s.items()),
                      left=tuple(left.items()), ahead_s=ahead,
                      legacy_rounds=tuple(legacy_round_s.items()), setup_s=setup,
                      legacy_checks_s=legacy_checks, engine_checks_s=engine_checks)


def _sum_rounds(rounds, seconds: dict, left: Optional[dict] = None) -> None:
    """Add one direction's recorded ``rounds`` to ``seconds`` ({round name: s}) and, when
    given, ``left`` ({round name: candidates that left there; "finalists": timed in
    full}), in the rounds' order."""
    for r in rounds:
        name = _ROUND_NAMES.get(r.get("round"), f"round {r.get('round')}")
        if r.get("wall_s") is not None:
            seconds[name] = seconds.get(name, 0.0) + r["wall_s"]
        count = r.get("timed") if r.get("round") == "final" else r.get("left")
        if left is not None and isinstance(count, int):
            left[name] = left.get(name, 0) + count


# A problem whose directions' recorded walls exceed the seconds its sweep spent on it by
# more than this was answered (at least in part) from the results store.
_STORED_SLACK_S = 0.5


def sweep_search_time(entries) -> Tuple[SearchTime, int]:
    """(the SearchTime of the directions a sweep measured itself, how many of its
    problems it left out because their explorations' walls were recorded by an earlier
    run: a results store's answers, whose recorded walls exceed the seconds this sweep
    spent on the problem). ``entries``: the sweep's SweepEntry list."""
    dirs: List[DirectionResult] = []
    stored = 0
    for e in entries:
        if e.exploration is None:
            continue
        t = search_time(e.exploration.directions)
        if e.seconds is not None and t.measured_s is not None \
                and t.measured_s > e.seconds + _STORED_SLACK_S:
            stored += 1
            continue
        dirs += e.exploration.directions
    return search_time(dirs), stored
