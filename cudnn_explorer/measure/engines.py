"""cuDNN 9 engine configs on the GPU: the space PyTorch's engine-API path searches, and
more. Drives the extension's EngineSearch (csrc/engines.cpp) in this process; callers run
it in a worker process under a watchdog (measure/engine_worker.py), since a config can
hang or crash the process. The knob space itself is pure (core/knobs.py)."""
from __future__ import annotations

import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..core.knobs import (ATTEMPTS_PER_CONFIG, OPERATION_OF, Knobs, allowed_by_pytorch,
                          candidate_configs, config_tag, kernel_family, parse_tags,
                          same_kernels, space_size)
from ..core.options import TimingSpec
from ..core.records import EngineConfig, EngineSpace
from . import native
from .kernels import kernel_names
from .tensors import OUTPUT_OF, check_output
from .timing import timing_from_native

__all__ = ["explore_engines"]


def _run_config(search, spec: TimingSpec, problem, direction: str, tensors, ref,
                engine: int, knobs: Knobs, heuristic_ranks: Dict[str, int], kernels: bool,
                stage: Callable[[str], None] = lambda s: None) -> EngineConfig:
    """Build, time (when ``spec.retime``) and check (against ``ref``, when given) one
    config, and return its record.
    ``stage`` hears "running" between building the plan and running it (a watchdog
    tells which hung)."""
    out_name = OUTPUT_OF[direction]
    tensors[out_name].fill_(float("nan"))
    res = search.build(engine, [list(k) for k in knobs])
    if res.status == "built":
        stage("running")
        res = search.measure(res, spec.retime, native.timing_options(spec))
    op = OPERATION_OF[direction]
    tag = config_tag(direction, engine, knobs)
    if res.name:
        tag = res.name if res.name.startswith(op) else f"{op}_{res.name}"
    checked = None
    if res.status == "OK" and ref is not None:
        # TENSOR_CORE configs on float32 use TF32: hold them to the TF32 bound.
        math_type = "DEFAULT_MATH" if "TENSOR_CORE" in res.numeric_notes else problem.math_type
        checked = check_output(problem, tensors[out_name], ref, math_type)
    names = None
    if res.status == "OK" and kernels:
        names = list(kernel_names(lambda i=res.plan_index: native.call(
            f"executing {tag}", search.execute, i)))
    return EngineConfig(
        tag=tag, engine=engine, knobs=[list(k) for k in knobs], status=res.status,
        message=res.message, numeric_notes=list(res.numeric_notes),
        behavior_notes=list(res.behavior_notes),
        workspace_bytes=res.workspace_bytes if res.workspace_bytes >= 0 else None,
        build_ms=res.build_ms if res.status != "config rejected" else None,
        timing=timing_from_native(res.timing) if res.timed else None,
        max_error=checked.max_error if checked else None,
        tolerance=checked.tolerance if checked else None,
        output_finite=checked.output_finite if checked else None,
        kernels=names, heuristic_ranks=dict(heuristic_ranks),
        allowed=allowed_by_pytorch(list(res.numeric_notes), problem.dtype, problem.tf32))


def explore_engines(problem, direction: str, native_problem, tensors, ref=None,
                    legacy_rows: Sequence = (), max_per_engine: int = 8,
                    time_budget_s: Optional[float] = 120.0,
                    timing: TimingSpec = TimingSpec(), kernels: bool = True,
                    preferred_tags: Sequence[str] = (), sample: bool = True,
                    progress: Optional[Callable[[str], None]] = None,
                    prior: Optional[dict] = None,
                    on_event: Optional[Callable[[dict], None]] = None,
                    search=None) -> EngineSpace:
    """In this process: enumerate every engine of one direction, build, time and check up to
    ``max_per_engine`` valid knob configs per engine (trying at most ATTEMPTS_PER_CONFIG
    times as many candidates, see candidate_configs), time each as ``timing`` says (the
    options of the legacy rows, unchanged), check each output against ``ref``,
    and map legacy rows (with .kernels) to configs by the kernels they launch.
    ``preferred_tags`` (PyTorch's pick and the plans it timed) are tried first, then the
    configs cuDNN's heuristics list, for every engine, so that a time budget cuts the
    sampling rather than the configs that matter most. ``sample`` False stops after
    those listed configs: no sampling of the knob space, no search for the config of a
    legacy algorithm.

    A config can hang or crash the process on the GPU, so callers normally run this in a
    worker process (measure/engine_worker.py): ``on_event``
    receives {"start": ...} before and {"attempt": ...} after every config; ``prior``
    ({"attempts": [...], "failed": [...]}, as a supervisor collected them from earlier
    workers) is taken as already done, so a restarted worker carries on where the last one
    stopped. ``search`` replaces the native EngineSearch (tests)."""
    say = progress or (lambda m: None)
    emit = on_event or (lambda ev: None)
    t0 = time.perf_counter()
    op = OPERATION_OF[direction]
    say(f"{direction}: building the operation graph")
    if search is None:
        search = native.engine_search(direction, native_problem)
    count = native.call(f"counting the {direction} engines", search.engine_count)
    heur: Dict[str, List[Tuple[int, Knobs]]] = {}
    for mode in ("A", "B", "FALLBACK"):
        say(f"{direction}: heuristic mode {mode} ({time.perf_counter() - t0:.1f} s)")
        names = native.call(f"querying heuristic mode {mode}", search.heuristics, mode)
        heur[mode] = [(t.engine, t.knobs) for t in parse_tags(f"{op}_{n}" for n in names)]
    pref = [t for t in parse_tags(preferred_tags) if t.operation == op]
    attempts = max_per_engine * ATTEMPTS_PER_CONFIG
    engines: List[dict] = []
    configs: List[EngineConfig] = []
    exhausted = False
    say(f"{direction}: querying the knobs of {count} engines ({time.perf_counter() - t0:.1f} s)")
    queues: Dict[int, List[Knobs]] = {}
    wanted: Dict[int, set] = {}
    done: Dict[int, set] = {e: set() for e in range(count)}
    for e in range(count):
        info = native.call(f"querying engine {e}", search.engine_info, e)
        knobs = [[k.type, k.min_value, k.max_value, k.stride] for k in info.knobs]
        listed = [t.knobs for t in pref if t.engine == e]
        # without sampling, what PyTorch's generator lists (modes A and FALLBACK) and no more
        modes = ("A", "B", "FALLBACK") if sample else ("A", "FALLBACK")
        listed += [k for m in modes for (en, k) in heur[m] if en == e]
        queues[e] = candidate_configs(knobs, attempts, listed) if info.status == "OK" else []
        wanted[e] = set(listed)
        engines.append({"engine": e, "status": info.status, "knobs": knobs,
                              "space": space_size(knobs) if info.status == "OK" else 0,
                              "tried": 0, "rejected": 0, "configs": 0, "failed": 0})

    def ranks(e: int, ch: Knobs) -> Dict[str, int]:
        return {m: lst.index((e, ch)) + 1 for m, lst in heur.items() if (e, ch) in lst}

    # What earlier workers did (a restart after a config hung or crashed one of them).
    for a in (prior or {}).get("attempts", []):
        e, ch = int(a["engine"]), tuple(tuple(k) for k in a["knobs"])
        done[e].add(ch)
        engines[e]["tried"] += 1
        if a.get("config") is None:
            engines[e]["rejected"] += 1
        else:
            engines[e]["configs"] += 1
            configs.append(EngineConfig.from_dict(a["config"]))
    for f in (prior or {}).get("failed", []):
        e, ch = int(f["engine"]), tuple(tuple(k) for k in f["knobs"])
        done[e].add(ch)
        configs.append(EngineConfig(tag=config_tag(direction, e, ch), engine=e,
                                    knobs=[list(k) for k in ch], status=f["status"],
                                    message=f["message"], heuristic_ranks=ranks(e, ch)))
        engines[e]["tried"] += 1
        engines[e]["configs"] += 1
        engines[e]["failed"] += 1

    def over_budget() -> bool:
        nonlocal exhausted
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            exhausted = True
        return exhausted

    def attempt(e: int, ch: Knobs) -> Optional[EngineConfig]:
        entry = engines[e]
        done[e].add(ch)
        tag = config_tag(direction, e, ch)
        say(f"{direction}: engine {e}/{count - 1} {tag} ({time.perf_counter() - t0:.1f} s)")
        emit({"start": {"engine": e, "knobs": [list(k) for k in ch], "tag": tag}})
        cfg = _run_config(search, timing, problem, direction, tensors, ref, e, ch, ranks(e, ch),
                          kernels, stage=lambda st: emit({"stage": st}))
        entry["tried"] += 1
        if cfg.status == "config rejected":  # an invalid knob combination: counted only
            entry["rejected"] += 1
            emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch], "config": None}})
            return None
        entry["configs"] += 1
        configs.append(cfg)
        emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch],
                          "config": cfg.to_dict()}})
        return cfg

    def find_legacy() -> None:
        # A legacy algorithm whose kernels no config ran yet: search on through the
        # engines that ran kernels of the same family (name up to its tile size).
        for r in legacy_rows if kernels and sample else ():
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
                    cfg = attempt(e, ch)
                    found = cfg is not None and same_kernels(cfg.kernels, r.kernels)

    # Phase 0: PyTorch's configs, in the order given (its pick first), so that a time
    # budget never cuts them; phase 1: the other listed configs of every engine; phase 2:
    # the configs of the legacy algorithms, searched near the engines run so far; phase 3:
    # sampling, engine by engine, then phase 2 again for an algorithm whose kernel family
    # only the sampling ran. The time budget cuts the later phases first.
    for t in pref:
        if t.engine < count and t.knobs in queues[t.engine] and t.knobs not in done[t.engine] \
                and not over_budget():
            attempt(t.engine, t.knobs)
    for e in range(count):
        for ch in [c for c in queues[e] if c in wanted[e] and c not in done[e]]:
            if over_budget():
                break
            attempt(e, ch)
    find_legacy()
    for e in range(count) if sample else ():
        for ch in [c for c in queues[e] if c not in wanted[e] and c not in done[e]]:
            if engines[e]["configs"] >= max_per_engine or over_budget():
                break
            attempt(e, ch)
    find_legacy()
    for e in range(count):
        engines[e]["untried"] = len(queues[e]) - engines[e]["tried"]
    return EngineSpace(
        engine_count=count, engines=engines, configs=configs, max_per_engine=max_per_engine,
        attempts_per_engine=attempts, time_budget_s=time_budget_s, budget_exhausted=exhausted,
        sampled=sample,
        legacy_map={f"{r.algo_name} ({r.math_type})": [
            c.tag for c in configs if same_kernels(c.kernels, r.kernels)]
            for r in legacy_rows if r.kernels and kernels})  # none when kernels were not read
