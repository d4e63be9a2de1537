"""cuDNN 9 engine configs: the space PyTorch's engine-API path searches, and more.

Pure helpers (knob spaces, sampling, tags, PyTorch's rules, summaries) come first and need
no GPU; :func:`explore_engines` drives the extension's EngineSearch (csrc/engines.cpp).
"""
from __future__ import annotations

import math
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .kernels import same_kernels
from .logs import OPERATIONS, EngineTag, format_tag, parse_tag
from .records import MIB, DirectionResult, EngineConfig, EngineSpace

__all__ = ["OPERATION_OF", "knob_values", "space_size", "candidate_configs", "config_tag",
           "allowed_by_pytorch", "summary_lines", "summary_rows", "SUMMARY_HEADERS",
           "explore_engines"]

OPERATION_OF = {d: op for op, d in OPERATIONS.items()}  # "fwd" -> "ConvFwd", ...
# Candidates tried per engine, per valid config wanted: most knob combinations of a large
# space are invalid for a given problem, and rejecting one costs well under a millisecond.
ATTEMPTS_PER_CONFIG = 16
Knobs = Tuple[Tuple[int, int], ...]


def knob_values(spec: Sequence[int]) -> List[int]:
    """Values of one knob [type, min, max, stride]: min, min+stride, ..., max."""
    _, lo, hi, step = spec
    return list(range(lo, hi + 1, max(step, 1))) if hi >= lo else [lo]


def space_size(knobs: Sequence[Sequence[int]]) -> int:
    return math.prod(len(knob_values(k)) for k in knobs) if knobs else 1


def candidate_configs(knobs: Sequence[Sequence[int]], attempts: int,
                      preferred: Iterable[Knobs] = ()) -> List[Knobs]:
    """Up to ``attempts`` distinct knob choices for one engine, in the order to try them:
    ``preferred`` (PyTorch's and cuDNN's heuristics' picks) first, then the engine's
    default (no knob set), then every combination when there are few enough, otherwise
    combinations evenly spaced through the mixed-radix enumeration (first knob slowest).
    Many combinations are invalid for a given problem (cuDNN rejects them when the config
    is finalised), so callers try candidates until enough are valid. Deterministic, so
    runs are reproducible."""
    types = [k[0] for k in knobs]
    values = [knob_values(k) for k in knobs]
    total = space_size(knobs)
    out: List[Knobs] = []
    seen = set()

    def add(c: Knobs):
        if c not in seen and len(out) < attempts:
            seen.add(c)
            out.append(c)

    def at(n: int) -> Knobs:
        combo = []
        for v in reversed(values):
            combo.append(v[n % len(v)])
            n //= len(v)
        return tuple(zip(types, reversed(combo)))

    for p in preferred:
        add(tuple(sorted(p)))
    add(())
    room = max(attempts - len(out), 1)
    if total <= room:
        for n in range(total):
            add(at(n))
    else:
        step = total / room
        for i in range(room):
            add(at(int(i * step)))
        n = 0
        while len(out) < attempts and n < total:  # spaced picks that were duplicates
            add(at(n))
            n += 1
    return out


def config_tag(direction: str, engine: int, knobs: Knobs) -> str:
    """PyTorch's / cudnn-frontend's tag: knobs in increasing knob-type order."""
    return format_tag(EngineTag(OPERATION_OF[direction], engine, tuple(sorted(knobs))))


def allowed_by_pytorch(numeric_notes: Sequence[str], dtype: str, tf32: Optional[bool],
                       deterministic: bool = False) -> bool:
    """PyTorch's Conv_v8 filters: float32 with TF32 off excludes TENSOR_CORE configs;
    deterministic mode excludes NONDETERMINISTIC ones."""
    if dtype == "float32" and tf32 is False and "TENSOR_CORE" in numeric_notes:
        return False
    if deterministic and "NONDETERMINISTIC" in numeric_notes:
        return False
    return True


def summary_lines(d: DirectionResult) -> List[str]:
    """Best engine config vs best legacy algorithm vs PyTorch's pick, for one direction."""
    sp = d.engines
    if sp is None:
        return []
    out = []
    best = sp.best(allowed_only=True)
    legacy = d.best()
    bench = d.pytorch_pick("benchmark", limit_zero=False)  # at its own benchmark_limit
    tried = sum(e.get("tried", 0) for e in sp.engines)
    rejected = sum(e.get("rejected", 0) for e in sp.engines)
    ok = sum(1 for c in sp.configs if c.ok)
    usable = sum(1 for e in sp.engines if e.get("configs", 0))
    failed = sum(e.get("failed", 0) for e in sp.engines)
    out.append(f"engines: {usable} of {sp.engine_count} engines accept this problem; "
               f"{tried} knob configs tried (at most {sp.attempts_per_engine} per engine), "
               f"{rejected} rejected by cuDNN as invalid, {len(sp.configs)} valid (at most "
               f"{sp.max_per_engine} per engine), {ok} built, ran and timed"
               + (f", {failed} hung or crashed the worker process (recorded, skipped on "
                  f"restart)" if failed else "")
               + ("; time budget exhausted, the rest skipped" if sp.budget_exhausted else "")
               + (f"; explored in {sp.wall_s:.0f} s" if sp.wall_s is not None else ""))
    rtc = [c for c in sp.configs if "RUNTIME_COMPILATION" in c.behavior_notes
           and c.build_ms is not None]
    if rtc:
        slow = max(rtc, key=lambda c: c.build_ms)
        out.append(f"run-time compiled configs: {len(rtc)}, building their plans took "
                   f"{sum(c.build_ms for c in rtc) / 1e3:.1f} s in all (slowest {slow.tag}, "
                   f"{slow.build_ms:.0f} ms), a cost paid once per process by whoever uses them")
    if best is not None:
        notes = f" [{', '.join(best.numeric_notes)}]" if best.numeric_notes else ""
        out.append(f"best engine config: {best.tag}{notes} {best.time:.4f} ms, workspace "
                   f"{best.workspace_bytes / MIB:.2f} MiB")
    if legacy is not None and legacy.timing is not None and best is not None:
        out.append(f"best legacy algorithm: {legacy.algo_name} ({legacy.math_type}) "
                   f"{legacy.timing.median_ms:.4f} ms = {legacy.timing.median_ms / best.time:.2f}x "
                   f"the best engine config's time")
    if bench is not None and bench.engine_tag:
        ours = sp.config(bench.engine_tag)
        where = (f"found in our list, re-timed {ours.time:.4f} ms vs PyTorch's own "
                 f"{bench.steady.median_ms:.4f} ms" if ours is not None and ours.time
                 else "not in our list (" + (ours.status + ": " + ours.message[:80]
                                             if ours is not None else
                                             "cuDNN rejected this config for our graph")
                 + ")")
        out.append(f"PyTorch's benchmark pick {bench.engine_tag}: {where}")
        timed = {t for t, _ in bench.timed}
        if best is not None:
            if best.tag in timed:
                out.append("PyTorch's timed candidates contained the best config")
            else:
                cand = {c["tag"] for c in bench.candidates}
                why = "a candidate cut by benchmark_limit" if best.tag in cand else \
                    "not among its heuristic + fallback candidates"
                gap = (bench.steady.median_ms / best.time - 1) * 100
                out.append(f"PyTorch missed {best.tag} ({why}); its pick is {gap:+.0f}% slower")
    for algo, tags in sp.legacy_map.items():
        out.append(f"legacy {algo} runs the kernels of "
                   + (", ".join(tags[:3]) + (f" (+{len(tags) - 3} more)" if len(tags) > 3 else "")
                      if tags else "no engine config we tried"))
    return out


def summary_rows(exp) -> List[List[str]]:
    """One row per direction: best legacy algorithm, best engine config (among those
    PyTorch's rules allow) and PyTorch's benchmark pick, each with its steady-state
    median in ms, and which of them is fastest. Empty when no direction has engines."""
    rows = []
    for d in exp.directions:
        sp = d.engines
        if sp is None:
            continue
        legacy = d.best()
        best = sp.best(allowed_only=True)
        bench = d.pytorch_pick("benchmark", api=None, limit_zero=False)
        cells = {"best legacy algorithm": (
                     f"{legacy.algo_name} ({legacy.math_type})", legacy.timing.median_ms)
                 if legacy is not None and legacy.timing is not None else None,
                 "best engine config": (best.tag, best.time) if best is not None else None,
                 "PyTorch's benchmark pick": (
                     bench.engine_tag or bench.legacy_algo or "?", bench.steady.median_ms)
                 if bench is not None and bench.steady is not None else None}
        timed = {k: v for k, v in cells.items() if v is not None}
        row = [d.direction]
        for k, v in cells.items():
            row.append("-" if v is None else f"{v[0]}  {v[1]:.4f}"
                       + (" (budget cut)" if k == "best engine config" and sp.budget_exhausted
                          else ""))
        row.append(fastest_cell(timed))
        rows.append(row)
    return rows


_SHORT = {"best legacy algorithm": "legacy", "best engine config": "engine",
          "PyTorch's benchmark pick": "PyTorch"}


def fastest_cell(timed: Dict[str, Tuple[str, float]], tie: float = 0.03) -> str:
    """Which entry is fastest, and how much slower each other one is; "tie" when all are
    within ``tie`` of the fastest (a difference that small is within run-to-run noise)."""
    if not timed:
        return "-"
    fastest = min(timed, key=lambda k: timed[k][1])
    t0 = timed[fastest][1]
    others = ", ".join(f"{_SHORT[k]} {(v[1] / t0 - 1) * 100:+.0f}%"
                       for k, v in timed.items() if k != fastest)
    if all(v[1] <= t0 * (1 + tie) for v in timed.values()):
        return f"tie within {tie * 100:.0f}%" + (f" ({others})" if others else "")
    return fastest + (f" ({others})" if others else "")


SUMMARY_HEADERS = ["direction", "best legacy algorithm (ms)", "best engine config (ms)",
                   "PyTorch's benchmark pick (ms)", "fastest"]


def _run_config(search, opt, problem, direction, tensors, ref, cfg: EngineConfig,
                kernels: bool, stage: Callable[[str], None] = lambda s: None) -> None:
    """Build, time and check one config; fills ``cfg`` in place. ``stage`` hears
    "running" between building the plan and running it (a watchdog tells which hung)."""
    from . import gpu
    from . import kernels as kn

    out_name = gpu.OUTPUT_OF[direction]
    tensors[out_name].fill_(float("nan"))
    res = search.build(cfg.engine, cfg.knobs)
    if res.status == "built":
        stage("running")
        res = search.measure(res, True, opt)
    cfg.status, cfg.message = res.status, res.message
    op = OPERATION_OF[direction]
    if res.name:
        cfg.tag = res.name if res.name.startswith(op) else f"{op}_{res.name}"
    cfg.numeric_notes = list(res.numeric_notes)
    cfg.behavior_notes = list(res.behavior_notes)
    cfg.workspace_bytes = res.workspace_bytes if res.workspace_bytes >= 0 else None
    cfg.build_ms = res.build_ms
    cfg.allowed = allowed_by_pytorch(cfg.numeric_notes, problem.dtype, problem.tf32)
    if res.timed:
        cfg.timing = gpu.timing_from_native(res.timing)
    if res.status == "OK" and ref is not None:
        # TENSOR_CORE configs on float32 use TF32: hold them to the TF32 bound.
        math_type = ("FMA_MATH" if problem.dtype == "float32"
                     and "TENSOR_CORE" not in cfg.numeric_notes and not problem.tf32
                     else "DEFAULT_MATH")
        gpu.check_output(problem, cfg, tensors[out_name], ref, math_type)
    if res.status == "OK" and kernels:
        cfg.kernels = list(kn.kernel_names(lambda i=res.plan_index: search.execute(i)))


def explore_engines(problem, direction: str, native_problem, tensors, ref=None,
                    legacy_rows: Sequence = (), max_per_engine: int = 8,
                    time_budget_s: Optional[float] = 120.0, budget_ms: float = 20.0,
                    graph: bool = True, kernels: bool = True,
                    preferred_tags: Sequence[str] = (),
                    progress: Optional[Callable[[str], None]] = None,
                    prior: Optional[dict] = None,
                    on_event: Optional[Callable[[dict], None]] = None,
                    search=None) -> EngineSpace:
    """In this process: enumerate every engine of one direction, build, time and check up to
    ``max_per_engine`` valid knob configs per engine (trying at most ATTEMPTS_PER_CONFIG
    times as many candidates, see candidate_configs), check each output against ``ref``,
    and map legacy rows (with .kernels) to configs by the kernels they launch.
    ``preferred_tags`` (PyTorch's pick and the plans it timed) are tried first, then the
    configs cuDNN's heuristics list, for every engine, so that a time budget cuts the
    sampling rather than the configs that matter most.

    A config can hang or crash the process on the GPU, so callers normally run this in a
    worker process (explore_engines_isolated, cudnn_explorer.engine_worker): ``on_event``
    receives {"start": ...} before and {"attempt": ...} after every config; ``prior``
    ({"attempts": [...], "failed": [...]}, as a supervisor collected them from earlier
    workers) is taken as already done, so a restarted worker carries on where the last one
    stopped. ``search`` replaces the native EngineSearch (tests)."""
    from . import _native

    say = progress or (lambda m: None)
    emit = on_event or (lambda ev: None)
    t0 = time.perf_counter()
    op = OPERATION_OF[direction]
    say(f"{direction}: building the operation graph")
    if search is None:
        search = _native.engine_search(direction, native_problem)
    count = search.engine_count()
    heur: Dict[str, List[Tuple[int, Knobs]]] = {}
    for mode in ("A", "B", "FALLBACK"):
        say(f"{direction}: heuristic mode {mode} ({time.perf_counter() - t0:.1f} s)")
        heur[mode] = [(t.engine, t.knobs) for t in _tags(f"{op}_{n}" for n in
                                                          search.heuristics(mode))]
    pref = [t for t in _tags(preferred_tags) if t.operation == op]
    opt = _native.timing_options(budget_ms, graph=graph) if native_problem is not None else None
    attempts = max_per_engine * ATTEMPTS_PER_CONFIG
    space = EngineSpace(engine_count=count, max_per_engine=max_per_engine,
                        attempts_per_engine=attempts, time_budget_s=time_budget_s)
    say(f"{direction}: querying the knobs of {count} engines ({time.perf_counter() - t0:.1f} s)")
    queues: Dict[int, List[Knobs]] = {}
    wanted: Dict[int, set] = {}
    done: Dict[int, set] = {e: set() for e in range(count)}
    for e in range(count):
        info = search.engine_info(e)
        knobs = [[k.type, k.min_value, k.max_value, k.stride] for k in info.knobs]
        listed = [t.knobs for t in pref if t.engine == e]
        listed += [k for m in ("A", "B", "FALLBACK") for (en, k) in heur[m] if en == e]
        queues[e] = candidate_configs(knobs, attempts, listed) if info.status == "OK" else []
        wanted[e] = set(listed)
        space.engines.append({"engine": e, "status": info.status, "knobs": knobs,
                              "space": space_size(knobs) if info.status == "OK" else 0,
                              "tried": 0, "rejected": 0, "configs": 0, "failed": 0})

    def rank(cfg: EngineConfig, e: int, ch: Knobs) -> None:
        for m, lst in heur.items():
            if (e, ch) in lst:
                cfg.heuristic_ranks[m] = lst.index((e, ch)) + 1

    # What earlier workers did (a restart after a config hung or crashed one of them).
    for a in (prior or {}).get("attempts", []):
        e, ch = int(a["engine"]), tuple(tuple(k) for k in a["knobs"])
        done[e].add(ch)
        space.engines[e]["tried"] += 1
        if a.get("config") is None:
            space.engines[e]["rejected"] += 1
        else:
            space.engines[e]["configs"] += 1
            space.configs.append(EngineConfig.from_dict(a["config"]))
    for f in (prior or {}).get("failed", []):
        e, ch = int(f["engine"]), tuple(tuple(k) for k in f["knobs"])
        done[e].add(ch)
        cfg = EngineConfig(tag=config_tag(direction, e, ch), engine=e,
                           knobs=[list(k) for k in ch], status=f["status"],
                           message=f["message"])
        rank(cfg, e, ch)
        space.engines[e]["tried"] += 1
        space.engines[e]["configs"] += 1
        space.engines[e]["failed"] += 1
        space.configs.append(cfg)

    def over_budget() -> bool:
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            space.budget_exhausted = True
        return space.budget_exhausted

    def attempt(e: int, ch: Knobs) -> Optional[EngineConfig]:
        entry = space.engines[e]
        done[e].add(ch)
        cfg = EngineConfig(tag=config_tag(direction, e, ch), engine=e,
                           knobs=[list(k) for k in ch])
        say(f"{direction}: engine {e}/{count - 1} {cfg.tag} ({time.perf_counter() - t0:.1f} s)")
        emit({"start": {"engine": e, "knobs": [list(k) for k in ch], "tag": cfg.tag}})
        _run_config(search, opt, problem, direction, tensors, ref, cfg, kernels,
                    stage=lambda st: emit({"stage": st}))
        entry["tried"] += 1
        if cfg.status == "config rejected":  # an invalid knob combination: counted only
            entry["rejected"] += 1
            emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch], "config": None}})
            return None
        entry["configs"] += 1
        rank(cfg, e, ch)
        space.configs.append(cfg)
        emit({"attempt": {"engine": e, "knobs": [list(k) for k in ch],
                          "config": cfg.to_dict()}})
        return cfg

    # Phase 1: the listed configs of every engine; phase 2: sampling, engine by engine.
    for e in range(count):
        for ch in [c for c in queues[e] if c in wanted[e] and c not in done[e]]:
            if over_budget():
                break
            attempt(e, ch)
    for e in range(count):
        for ch in [c for c in queues[e] if c not in wanted[e] and c not in done[e]]:
            if space.engines[e]["configs"] >= max_per_engine or over_budget():
                break
            attempt(e, ch)
    # Phase 3: a legacy algorithm whose kernels no config ran yet: search on through the
    # engines that ran kernels of the same family (name up to its tile size).
    for r in legacy_rows if kernels else ():
        if not r.kernels or any(same_kernels(c.kernels, r.kernels) for c in space.configs):
            continue
        fam = {kernel_family(k) for k in r.kernels}
        near = sorted({c.engine for c in space.configs
                       if c.kernels and fam & {kernel_family(k) for k in c.kernels}})
        say(f"{direction}: looking for the config of legacy {r.algo_name} ({r.math_type}) "
            f"in engines {near}")
        found = False
        for e in near:
            for ch in queues[e]:
                if found or over_budget():
                    break
                if ch in done[e]:
                    continue
                cfg = attempt(e, ch)
                found = cfg is not None and same_kernels(cfg.kernels, r.kernels)
    for e in range(count):
        space.engines[e]["untried"] = len(queues[e]) - space.engines[e]["tried"]
    for r in legacy_rows:
        if r.kernels:
            space.legacy_map[f"{r.algo_name} ({r.math_type})"] = [
                c.tag for c in space.configs if same_kernels(c.kernels, r.kernels)]
    return space


def kernel_family(name: str) -> str:
    """A kernel's name without its tile configuration: configs of one engine that differ
    only in knobs launch kernels of one family."""
    return name.split("_tilesize")[0].split("<")[0]


def _tags(names: Iterable[str]) -> List[EngineTag]:
    out = []
    for n in names:
        try:
            out.append(parse_tag(n))
        except ValueError:
            continue
    return out
