"""cuDNN 9 engine configs on the GPU: the space PyTorch's engine-API path searches, and
more. Drives the extension's EngineSearch (csrc/engines.cpp) in this process; callers run
it in a worker process under a watchdog (measure/engine_worker.py), since a config can
hang or crash the process. The knob space itself is pure (core/knobs.py)."""
from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from ..core.engine_prior import SKIPPED, heuristic_ranks, key, listed_event, replay
from ..core.knobs import (ATTEMPTS_PER_CONFIG, OPERATION_OF, Knobs, allowed_by_pytorch,
                          candidate_configs, config_tag, kernel_family, parse_tags,
                          same_kernels, space_size)
from ..core.options import TimingSpec
from ..core.records import EngineConfig, EngineSpace
from ..core.staging import (ROUNDS, Timed, bar_ms, cutoff_ms, decided, final_timing,
                             is_record, round_timing, skipped_round, survivors)
from . import native
from .kernels import distinct, kernel_names
from .search_inputs import ConfigRun, DirectionData, SearchSettings, Supervision
from .tensors import OUTPUT_OF, check_output
from .timing import timing_from_native

__all__ = ["explore_engines", "list_space", "prebuild", "Listing", "PreparedSearch",
           "SKIPPED"]


def _run_config(search, data: DirectionData, engine: int, knobs: Knobs,
                heuristic_ranks: Dict[str, int], run: ConfigRun,
                stage: Callable[[str], None] = lambda s: None, built=None):
    """Build (unless ``built``, a plan build() made earlier), time (as ``run`` says: when
    ``run.timing.retime``; a launch slower than ``run.cutoff_ms`` > 0 ends it, Note [cut
    launches] in csrc/timing.cpp) and check (against ``data.ref``, when given; with
    ``run.records``, only when its time beats ``run.records_over``, Note [records
    checked] in core/staging.py) one config of ``data``'s direction: (its record, the
    build result, for timing it again). ``stage`` hears "running" between building the
    plan and running it (a watchdog tells which hung)."""
    problem, direction, tensors, ref = data.problem, data.direction, data.tensors, data.ref
    out_name = OUTPUT_OF[direction]
    tensors[out_name].fill_(float("nan"))
    made = built if built is not None else search.build(engine, [list(k) for k in knobs])
    res = made
    if res.status == "built":
        stage("running")
        res = search.measure(res, run.timing.retime,
                             native.timing_options(run.timing, run.cutoff_ms,
                                                   kernels=run.kernels))
    op = OPERATION_OF[direction]
    tag = config_tag(direction, engine, knobs)
    if res.name:
        tag = res.name if res.name.startswith(op) else f"{op}_{res.name}"
    timing = timing_from_native(res.timing) if res.timed else None
    checked, check_ms = None, None
    leads = not run.records or is_record(
        timing.median_ms if res.status == "OK" and timing else None, run.records_over)
    if res.status == "OK" and ref is not None and leads:
        # TENSOR_CORE configs on float32 use TF32: hold them to the TF32 bound.
        math_type = "DEFAULT_MATH" if "TENSOR_CORE" in res.numeric_notes else problem.math_type
        t0 = time.perf_counter()
        checked = check_output(problem, tensors[out_name], ref, math_type)
        check_ms = (time.perf_counter() - t0) * 1e3
    names = None
    if res.status == "OK" and run.kernels:
        if res.timed and res.timing.kernels_read:
            names = list(distinct(res.timing.kernels))  # as its timing's graph named them
        else:
            names = list(kernel_names(lambda i=res.plan_index: native.call(
                f"executing {tag}", search.execute, i)))
    cfg = EngineConfig(
        tag=tag, engine=engine, knobs=[list(k) for k in knobs], status=res.status,
        message=res.message, numeric_notes=list(res.numeric_notes),
        behavior_notes=list(res.behavior_notes),
        workspace_bytes=res.workspace_bytes if res.workspace_bytes >= 0 else None,
        build_ms=res.build_ms if res.status != "config rejected" else None,
        timing=timing,
        max_error=checked.max_error if checked else None,
        tolerance=checked.tolerance if checked else None,
        output_finite=checked.output_finite if checked else None,
        kernels=names, heuristic_ranks=dict(heuristic_ranks),
        allowed=allowed_by_pytorch(list(res.numeric_notes), problem.dtype, problem.tf32),
        check_ms=check_ms)
    return cfg, made


class Listing(NamedTuple):
    """What a direction's search lists before any config is built: the engines (each's
    knobs and counters), the heuristic modes' configs, PyTorch's (``pref``), and each
    engine's queue of configs to try (``wanted``: those listed)."""

    count: int
    heur: Dict[str, List[Tuple[int, Knobs]]]
    pref: list
    attempts: int
    queues: Dict[int, List[Knobs]]
    wanted: Dict[int, set]
    engines: List[dict]

    def listed(self, only_preferred: bool = False) -> List[Tuple[int, Knobs]]:
        """The configs a search always tries, in its order: PyTorch's, in the order given
        (its pick first), then (unless ``only_preferred``) the other listed configs of
        every engine; a config may come twice."""
        out = [(t.engine, t.knobs) for t in self.pref
               if t.engine < self.count and t.knobs in self.queues[t.engine]]
        if not only_preferred:
            out += [(e, ch) for e in range(self.count) for ch in self.queues[e]
                    if ch in self.wanted[e]]
        return out


def list_space(search, direction: str, preferred_tags: Sequence[str], max_per_engine: int,
               sample: bool, say=lambda m: None) -> Listing:
    """The engines of one direction and what its search will try (explore_engines' first
    step; no GPU work): the engine count, the heuristic modes' lists, each engine's knobs
    and its queue of candidate configs."""
    t0 = time.perf_counter()
    op = OPERATION_OF[direction]
    count = native.call(f"counting the {direction} engines", search.engine_count)
    heur: Dict[str, List[Tuple[int, Knobs]]] = {}
    # without sampling, what PyTorch's generator lists (modes A and FALLBACK) and no more:
    # mode B's list would only rank the configs in the table
    modes = ("A", "B", "FALLBACK") if sample else ("A", "FALLBACK")
    for mode in modes:
        say(f"{direction}: heuristic mode {mode} ({time.perf_counter() - t0:.1f} s)")
        names = native.call(f"querying heuristic mode {mode}", search.heuristics, mode)
        heur[mode] = [(t.engine, t.knobs) for t in parse_tags(f"{op}_{n}" for n in names)]
    pref = [t for t in parse_tags(preferred_tags) if t.operation == op]
    attempts = max_per_engine * ATTEMPTS_PER_CONFIG
    engines: List[dict] = []
    say(f"{direction}: querying the knobs of {count} engines ({time.perf_counter() - t0:.1f} s)")
    queues: Dict[int, List[Knobs]] = {}
    wanted: Dict[int, set] = {}
    for e in range(count):
        info = native.call(f"querying engine {e}", search.engine_info, e)
        knobs = [[k.type, k.min_value, k.max_value, k.stride] for k in info.knobs]
        listed = [t.knobs for t in pref if t.engine == e]
        listed += [k for m in modes for (en, k) in heur[m] if en == e]
        queues[e] = candidate_configs(knobs, attempts, listed) if info.status == "OK" else []
        wanted[e] = set(listed)
        engines.append({"engine": e, "status": info.status, "knobs": knobs,
                        "space": space_size(knobs) if info.status == "OK" else 0,
                        "tried": 0, "rejected": 0, "configs": 0, "failed": 0})
    return Listing(count, heur, pref, attempts, queues, wanted, engines)


def prebuild(search, direction: str, listing: Listing, only_preferred: bool = False,
             emit=lambda ev: None) -> Dict[Tuple[int, Knobs], object]:
    """Build, ahead of their timing, the plans of the configs a search always tries (PyTorch's,
    then those listed, in explore_engines' order): {(engine, knobs): build result}, for
    PreparedSearch's ``prebuilt``. No GPU work: Note [engine search ahead] in
    measure/engine_serve.py. ``emit`` hears {"start": config} before each build and
    {"prebuilt": tag} after it (a watchdog tells which one hung)."""
    out: Dict[Tuple[int, Knobs], object] = {}
    for e, ch in listing.listed(only_preferred):
        if (e, ch) in out:
            continue
        tag = config_tag(direction, e, ch)
        emit({"start": {"engine": e, "knobs": [list(k) for k in ch], "tag": tag}})
        out[(e, ch)] = search.build(e, [list(k) for k in ch])
        emit({"prebuilt": tag})
    return out


@dataclass(frozen=True)
class PreparedSearch:
    """What a worker made of a direction's search ahead of its timing (Note [engine search
    ahead] in measure/engine_serve.py): ``search``, the native EngineSearch (or a test's
    fake; None: explore_engines makes one), ``listing`` (list_space's, made on ``search``;
    None: explore_engines lists) and ``prebuilt`` (prebuild's plans; None: none)."""

    search: Any = None
    listing: Optional[Listing] = None
    prebuilt: Optional[Dict[Tuple[int, Knobs], object]] = None


def explore_engines(data: DirectionData, settings: SearchSettings = SearchSettings(),
                    supervision: Supervision = Supervision(),
                    prepared: PreparedSearch = PreparedSearch()) -> EngineSpace:
    """In this process: enumerate every engine of ``data``'s direction, build, time and
    check up to ``settings.max_per_engine`` valid knob configs per engine (trying at most
    ATTEMPTS_PER_CONFIG times as many candidates, see candidate_configs), time each as
    ``settings.timing`` says (the options of the legacy rows, unchanged), check each
    output against ``data.ref``, and map ``settings.legacy_rows`` (with .kernels) to
    configs by the kernels they launch, within ``settings.time_budget_s``.
    ``settings.preferred_tags`` (PyTorch's pick and the plans it timed) are tried first,
    then the configs cuDNN's heuristics list, for every engine, so that a time budget cuts
    the sampling rather than the configs that matter most. ``settings.sample`` False stops
    after those listed configs: no sampling of the knob space, no search for the config of
    a legacy algorithm. ``settings.only_preferred`` (a re-timing of given plans, with
    ``sample`` False) stops after the preferred tags; ``settings.kernels`` False reads no
    kernels (and maps no legacy row).

    A config can hang or crash the process on the GPU, so callers normally run this in a
    worker process (measure/engine_worker.py): ``supervision.on_event`` receives
    {"listed": ...} once the engines are listed (core/engine_prior.py), then {"start": ...}
    before and {"attempt": ...} after every config (a staged search's later rounds:
    {"start": ...} and {"retimed": tag}), and ``supervision.progress`` the messages;
    ``supervision.prior`` ({"attempts": [...], "failed": [...]}, as a supervisor collected
    them from earlier workers) is taken as already done, so a restarted worker carries on
    where the last one stopped. ``prepared.search`` replaces the native EngineSearch
    (tests).

    ``settings.staged`` (with ``timing.retime``): every config is first timed briefly, and
    only the finalists get ``timing`` and the check (Note [staged search] in
    core/staging.py); ``settings.finalist_tags`` always reach the final round (default:
    every preferred tag). ``prepared.listing`` (list_space's, made on
    ``prepared.search``) and ``prepared.prebuilt`` (prebuild's plans) are what a worker did
    ahead of the job's timing (Note [engine search ahead] in measure/engine_serve.py).
    ``supervision.known_hang(engine, knobs)``: why a config is known to hang
    (core/hangs.py), or None; with ``settings.skip_known_hangs`` such a config is not
    sampled (nor searched for a legacy algorithm) but recorded as "skipped" with the
    reason, once its engine is known to accept the problem (Note [hangs of engines that
    accept] in core/hangs.py); one that is tried (listed, or not skipped) has its
    launches' limit said in its stage events (Note [known hangs])."""
    direction, timing = data.direction, settings.timing
    kernels, sample = settings.kernels, settings.sample
    say, emit, known_hang = supervision.say, supervision.emit, supervision.known_hang
    search, listing = prepared.search, prepared.listing
    t0 = time.perf_counter()
    op = OPERATION_OF[direction]
    if listing is None:
        if search is None:
            say(f"{direction}: building the operation graph")
            search = native.engine_search(direction, data.native)
        listing = list_space(search, direction, settings.preferred_tags,
                             settings.max_per_engine, sample, say)
    count, heur = listing.count, listing.heur
    attempts, queues, wanted, engines = (listing.attempts, listing.queues, listing.wanted,
                                         listing.engines)
    prebuilt = dict(prepared.prebuilt or {})
    exhausted = False

    def ranks(e: int, ch: Knobs) -> Dict[str, int]:
        return heuristic_ranks(heur, e, ch)

    def accepts(e: int) -> bool:
        """Whether cuDNN built a config of engine ``e`` for the problem (one recorded,
        failed, or skipped after its build: Note [hangs of engines that accept])."""
        return engines[e]["configs"] > 0 or engines[e].get("skipped", 0) > 0

    def skip(e: int, cfg: EngineConfig) -> None:
        """A config known to hang, recorded as skipped (not tried)."""
        engines[e]["skipped"] = engines[e].get("skipped", 0) + 1
        configs.append(cfg)

    # What earlier workers did (a restart after a config hung or crashed one of them);
    # the parent keeps the listing, to show what was tried if the search stops early
    emit(listed_event(count, attempts, engines, heur))
    configs, done = replay(direction, engines, supervision.prior, heur)

    staging = settings.staged and timing.retime
    first = round_timing(timing, ROUNDS[0]) if staging else timing
    built: Dict[int, object] = {}  # configs' index -> their build result, to time again

    def over_budget() -> bool:
        nonlocal exhausted
        budget = settings.time_budget_s
        if budget is not None and time.perf_counter() - t0 > budget:
            exhausted = True
        return exhausted

    def attempt(e: int, ch: Knobs, sampled: bool = False) -> Optional[EngineConfig]:
        """Build, time and check one config (None: cuDNN rejects it). A ``sampled`` one
        known to hang is recorded as skipped instead, with settings.skip_known_hangs, once
        its engine accepts the problem (None too; Note [hangs of engines that accept] in
        core/hangs.py)."""
        entry = engines[e]
        done[e].add(ch)
        tag = config_tag(direction, e, ch)
        why = known_hang(e, ch) if known_hang is not None else None
        skipping = bool(why and sampled and settings.skip_known_hangs)
        if skipping and accepts(e):
            return skipped(e, ch, tag, why)
        say(f"{direction}: engine {e}/{count - 1} {tag} ({time.perf_counter() - t0:.1f} s)")
        emit({"start": {"engine": e, "knobs": [list(k) for k in ch], "tag": tag}})
        if skipping:  # Note [hangs of engines that accept]: built, never launched
            made = prebuilt.pop((e, ch), None)
            if made is None:
                made = search.build(e, [list(k) for k in ch])
            if made.status == "built":  # the engine accepts the problem
                return skipped(e, ch, tag, why)
            prebuilt[(e, ch)] = made  # rejected, or its build failed: recorded as such
        # round 1's cutoff, and the watchdog's limit from it (Note [hung launches]); a
        # record is checked (Note [records checked])
        best = _bar(configs) if staging else None
        cut = cutoff_ms(best) if staging else 0.0
        known = {"known_hang": why} if why else {}
        cfg, made = _run_config(search, data, e, ch, ranks(e, ch),
                                ConfigRun(first, kernels, cutoff_ms=cut, records_over=best,
                                          records=staging),
                                stage=lambda s: emit({"stage": s, "cutoff_ms": cut, **known}),
                                built=prebuilt.pop((e, ch), None))
        entry["tried"] += 1
        if cfg.status == "config rejected":  # an invalid knob combination: counted only
            entry["rejected"] += 1
            emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch], "config": None}})
            return None
        entry["configs"] += 1
        if staging:  # its plan, to time it again in a later round
            built[len(configs)] = made
        configs.append(cfg)
        emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch],
                          "config": cfg.to_dict()}})
        return cfg

    def skipped(e: int, ch: Knobs, tag: str, why: str) -> None:
        """A sampled config known to hang, recorded as skipped with ``why``; None, as for a
        rejected config: it takes no place among its engine's configs."""
        cfg = EngineConfig(tag=tag, engine=e, knobs=[list(k) for k in ch], status=SKIPPED,
                           message=why, heuristic_ranks=ranks(e, ch))
        skip(e, cfg)
        emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch],
                          "config": cfg.to_dict()}})
        return None

    def find_legacy() -> None:
        # A legacy algorithm whose kernels no config ran yet: search on through the
        # engines that ran kernels of the same family (name up to its tile size).
        for r in settings.legacy_rows if kernels and sample else ():
            if not r.kernels or any(same_kernels(c.kernels, r.kernels) for c in configs):
                continue
            fam = {kernel_family(k) for k in r.kernels}
            near = sorted({c.engine for c in configs
                           if c.kernels and fam & {kernel_family(k) for k in c.kernels}})
            if not near:
                continue
            say(f"{direction}: looking for the config of legacy {r.algo_name} "
                f"({r.math_type}) in engines {near}")
            found = False
            for e in near:
                for ch in queues[e]:
                    if found or over_budget():
                        break
                    if ch in done[e]:
                        continue
                    cfg = attempt(e, ch, sampled=True)
                    found = cfg is not None and same_kernels(cfg.kernels, r.kernels)

    # Phase 0: PyTorch's configs, in the order given (its pick first), so that a time
    # budget never cuts them; phase 1: the other listed configs of every engine; phase 2:
    # the configs of the legacy algorithms, searched near the engines run so far; phase 3:
    # sampling, engine by engine, then phase 2 again for an algorithm whose kernel family
    # only the sampling ran. The time budget cuts the later phases first.
    for e, ch in listing.listed(settings.only_preferred):  # phases 0 and 1
        if ch in done[e]:
            continue
        if over_budget():
            break
        attempt(e, ch)
    find_legacy()
    for e in range(count) if sample else ():
        for ch in [c for c in queues[e] if c not in wanted[e] and c not in done[e]]:
            if engines[e]["configs"] >= settings.max_per_engine or over_budget():
                break
            attempt(e, ch, sampled=True)
    find_legacy()
    for e in range(count):
        engines[e]["untried"] = len(queues[e]) - engines[e]["tried"] - \
            engines[e].get("skipped", 0)
    rounds: List[dict] = []
    if staging:
        named = (settings.preferred_tags if settings.finalist_tags is None
                 else settings.finalist_tags)
        keep = {(t.engine, t.knobs) for t in parse_tags(named) if t.operation == op}
        keep |= set(heur["A"][:1])
        rounds = _rounds(search, data, timing, configs, built, keep, supervision,
                         time.perf_counter() - t0)
    return EngineSpace(
        engine_count=count, engines=engines, configs=configs,
        max_per_engine=settings.max_per_engine, attempts_per_engine=attempts,
        time_budget_s=settings.time_budget_s, budget_exhausted=exhausted,
        sampled=sample, rounds=rounds,
        legacy_map={f"{r.algo_name} ({r.math_type})": [
            c.tag for c in configs if same_kernels(c.kernels, r.kernels)]
            for r in settings.legacy_rows if r.kernels and kernels})  # none: kernels not read


def _bar(configs: Iterable[EngineConfig]) -> Optional[float]:
    """The time a config must beat to lead its round, after ``configs``: Note [records
    checked] in core/staging.py."""
    return bar_ms((c.time if c.ok else None, c.correct is False) for c in configs)


def _always(configs: List[EngineConfig], live: Sequence[int], keep: set) -> set:
    """The live configs that stay whatever their time: those ``keep`` names (by engine and
    knobs), and the fastest of each group a plan file may be filtered to (PyTorch's rules
    allow it, no NONDETERMINISTIC note, no workspace), so that a filtered choice is
    re-timed too."""
    out = {i for i in live if key(configs[i].engine, configs[i].knobs) in keep}
    groups = (lambda c: c.allowed, lambda c: "NONDETERMINISTIC" not in c.numeric_notes,
              lambda c: not c.workspace_bytes)
    for member in groups:
        inside = [i for i in live if member(configs[i])]
        if inside:
            out.add(min(inside, key=lambda i: configs[i].time))
    return out


def _rounds(search, data: DirectionData, full: TimingSpec, configs: List[EngineConfig],
            built: Dict[int, object], keep: set, supervision: Supervision,
            first_s: float) -> List[dict]:
    """The staged search of ``data``'s direction after its first round (timed as the
    configs were tried, in ``first_s`` seconds with the listing and builds): selection,
    round 2, then the finalists timed with ``full`` and checked against ``data.ref``;
    ``configs`` is updated in place; ``supervision`` hears its messages and events.
    Returns the rounds' record, each round's wall seconds with it."""
    direction, say, emit = data.direction, supervision.say, supervision.emit
    out: List[dict] = []
    t = time.perf_counter()

    def timed(i: int) -> bool:
        return configs[i].ok and configs[i].time is not None

    def again(i: int, spec: TimingSpec, check: bool, records: bool = False,
              best: Optional[float] = None) -> None:
        """Time config i with ``spec``; with ``check``, check it (with ``records``, only
        when it leads its round, ahead of ``best``: Note [records checked]); a config not
        checked now keeps the check it had."""
        c = configs[i]
        _, knobs = key(c.engine, c.knobs)
        emit({"start": {"engine": c.engine, "knobs": [list(k) for k in knobs], "tag": c.tag}})
        b = built.get(i)
        if b is None:  # recorded by an earlier worker: build it here
            b = built[i] = search.build(c.engine, [list(k) for k in knobs])
        cfg, _ = _run_config(search, data if check else replace(data, ref=None), c.engine,
                             knobs, c.heuristic_ranks,
                             ConfigRun(spec, False, records_over=best, records=records),
                             stage=lambda st: emit({"stage": st}), built=b)
        if cfg.correct is None:  # not checked now: the check it had stands
            cfg = replace(cfg, max_error=c.max_error, tolerance=c.tolerance,
                          output_finite=c.output_finite)
        checks = [ms for ms in (c.check_ms, cfg.check_ms) if ms is not None]
        configs[i] = replace(cfg, kernels=c.kernels, build_ms=c.build_ms,
                             check_ms=sum(checks) if checks else None)
        emit({"retimed": c.tag})

    live = [i for i in range(len(configs)) if timed(i)]
    for number, rnd in enumerate(ROUNDS, 1):
        spec = round_timing(full, rnd)
        why = decided(live, {i for i in live if key(configs[i].engine, configs[i].knobs)
                             in keep}) if number > 1 else None
        if why:  # Note [decided rounds] in core/staging.py
            out.append(skipped_round(number, why, budget_ms=spec.budget_ms,
                                     keep_within=rnd.keep_within))
            t = time.perf_counter()
            continue
        if number > 1:
            say(f"{direction}: round {number}: timing {len(live)} configs again "
                f"({spec.budget_ms:g} ms each)")
            for k, i in enumerate(live):
                again(i, spec, check=configs[i].correct is None, records=True,
                      best=_bar(configs[j] for j in live[:k]))
            live = [i for i in live if timed(i)]
        wall = first_s if number == 1 else time.perf_counter() - t
        t = time.perf_counter()
        # a WRONG config sets no bar; it leaves unless named (Note [records checked])
        wrong = {i for i in live if configs[i].correct is False}
        named = {i for i in wrong if key(configs[i].engine, configs[i].knobs) in keep}
        for i in wrong - named:
            configs[i] = replace(configs[i], left_round=number, left_ratio=None)
        right = [i for i in live if i not in wrong]
        times = {i: Timed(configs[i].time, configs[i].timing.spread) for i in right}
        stay, left = survivors(times, rnd.keep_within, _always(configs, right, keep))
        for i, ratio in left.items():
            configs[i] = replace(configs[i], left_round=number, left_ratio=ratio)
        out.append({"round": number, "budget_ms": spec.budget_ms,
                    "keep_within": rnd.keep_within, "timed": len(live),
                    "left": len(left) + len(wrong - named), "wall_s": wall})
        live = [i for i in live if i in named or i in stay]
    them = "them" if len(live) != 1 else "it"
    say(f"{direction}: {len(live)} finalist{'s' * (len(live) != 1)}: timing {them} in full "
        f"and checking {them}")
    for i in live:  # Note [finalists' warm-up] in core/staging.py
        again(i, final_timing(full), check=True)
    out.append({"round": "final", "budget_ms": full.budget_ms, "timed": len(live),
                "wall_s": time.perf_counter() - t})
    return out
