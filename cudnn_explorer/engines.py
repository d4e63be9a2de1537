"""cuDNN 9 engine configs: the space PyTorch's engine-API path searches, and more.

Pure helpers (knob spaces, sampling, tags, PyTorch's rules, summaries) come first and need
no GPU; :func:`explore_engines` drives the extension's EngineSearch (csrc/engines.cpp).
"""
from __future__ import annotations

import itertools
import math
import time
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .kernels import same_kernels
from .logs import EngineTag, format_tag, parse_tag
from .records import MIB, DirectionResult, EngineConfig, EngineSpace

__all__ = ["OPERATION_OF", "knob_values", "space_size", "sample_configs", "config_tag",
           "allowed_by_pytorch", "summary_lines", "explore_engines"]

OPERATION_OF = {"fwd": "ConvFwd", "bwd-data": "ConvBwdData", "bwd-filter": "ConvBwdFilter"}
Knobs = Tuple[Tuple[int, int], ...]


def knob_values(spec: Sequence[int]) -> List[int]:
    """Values of one knob [type, min, max, stride]: min, min+stride, ..., max."""
    _, lo, hi, step = spec
    return list(range(lo, hi + 1, max(step, 1))) if hi >= lo else [lo]


def space_size(knobs: Sequence[Sequence[int]]) -> int:
    return math.prod(len(knob_values(k)) for k in knobs) if knobs else 1


def sample_configs(knobs: Sequence[Sequence[int]], cap: int,
                   preferred: Iterable[Knobs] = ()) -> List[Knobs]:
    """Knob choices to try for one engine: every combination when there are at most
    ``cap``; otherwise the ``preferred`` ones (those cuDNN's heuristics list) first, then
    combinations evenly spaced through the mixed-radix enumeration, up to ``cap``.
    Deterministic, so runs are reproducible."""
    types = [k[0] for k in knobs]
    values = [knob_values(k) for k in knobs]
    total = math.prod(len(v) for v in values) if knobs else 1
    out: List[Knobs] = []
    seen = set()

    def add(c: Knobs):
        if c not in seen:
            seen.add(c)
            out.append(c)

    if total <= cap:
        for combo in itertools.product(*values) if knobs else [()]:
            add(tuple(zip(types, combo)))
        return out
    for p in preferred:
        if len(out) >= cap:
            break
        add(tuple(sorted(p)))
    step = total / max(cap - len(out), 1)
    i = 0.0
    def at(n: int) -> Knobs:
        combo = []
        for v in reversed(values):
            combo.append(v[n % len(v)])
            n //= len(v)
        return tuple(zip(types, reversed(combo)))

    while len(out) < cap and i < total:
        add(at(int(i)))
        i += step
    n = 0
    while len(out) < cap and n < total:  # duplicates skipped above: fill in order
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
    bench = next((p for p in d.pytorch if p.ok and p.mode == "benchmark" and p.api == "engine"
                  and p.benchmark_limit != 0), None)
    tried = len(sp.configs)
    ok = sum(1 for c in sp.configs if c.ok)
    out.append(f"engines: {sp.engine_count} engines, {tried} configs tried (at most "
               f"{sp.max_per_engine} per engine), {ok} built and ran"
               + ("; time budget exhausted, the rest skipped" if sp.budget_exhausted else ""))
    if best is not None:
        out.append(f"best engine config: {best.tag} [{', '.join(best.numeric_notes) or '-'}] "
                   f"{best.time:.4f} ms, workspace {best.workspace_bytes / MIB:.2f} MiB")
    if legacy is not None and legacy.timing is not None and best is not None:
        out.append(f"best legacy algorithm: {legacy.algo_name} ({legacy.math_type}) "
                   f"{legacy.timing.median_ms:.4f} ms = {legacy.timing.median_ms / best.time:.2f}x "
                   f"the best engine config")
    if bench is not None and bench.engine_tag:
        ours = sp.config(bench.engine_tag)
        where = (f"found in our list, re-timed {ours.time:.4f} ms vs PyTorch's own "
                 f"{bench.steady.median_ms:.4f} ms" if ours is not None and ours.time
                 else "not in our list (its knobs were not sampled)")
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


def _run_config(search, opt, problem, direction, tensors, ref, cfg: EngineConfig,
                kernels: bool) -> None:
    """Build, time and check one config; fills ``cfg`` in place."""
    from . import gpu
    from . import kernels as kn

    out_name = gpu.OUTPUT_OF[direction]
    tensors[out_name].fill_(float("nan"))
    res = search.run(cfg.engine, cfg.knobs, True, opt)
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
                    progress: Optional[Callable[[str], None]] = None) -> EngineSpace:
    """Enumerate every engine of one direction, build and time a bounded set of knob
    configs per engine (see sample_configs), check each output against ``ref``, and map
    legacy rows (with .kernels) to configs by kernel names. ``preferred_tags`` (e.g.
    PyTorch's pick and the plans it timed) are tried first for their engines."""
    from . import _native

    say = progress or (lambda m: None)
    t0 = time.perf_counter()
    say(f"{direction}: building the operation graph")
    search = _native.engine_search(direction, native_problem)
    count = search.engine_count()
    heur: Dict[str, List[Tuple[int, Knobs]]] = {}
    for mode in ("A", "B", "FALLBACK"):
        say(f"{direction}: heuristic mode {mode} ({time.perf_counter() - t0:.1f} s)")
        heur[mode] = [(r.engine, tuple(sorted((int(k), int(v)) for k, v in r.knobs)))
                      for r in search.heuristics(mode)]
    opt = _native.timing_options(budget_ms, graph=graph)
    space = EngineSpace(engine_count=count, max_per_engine=max_per_engine,
                        time_budget_s=time_budget_s)
    pref = []
    for t in preferred_tags:
        try:
            tag = parse_tag(t)
        except ValueError:
            continue
        if tag.operation == OPERATION_OF[direction]:
            pref.append(tag)
    say(f"{direction}: querying the knobs of {count} engines ({time.perf_counter() - t0:.1f} s)")
    # Plan the work: per engine, the knob configs to try. Then run the preferred ones
    # (PyTorch's and the heuristics') of every engine first, so that a time budget cuts
    # the exhaustive sampling rather than the configs that matter most.
    first: List[Tuple[int, Knobs]] = []
    rest: List[Tuple[int, Knobs]] = []
    for e in range(count):
        info = search.engine_info(e)
        knobs = [[k.type, k.min_value, k.max_value, k.stride] for k in info.knobs]
        listed = [tuple(sorted(t.knobs)) for t in pref if t.engine == e]
        listed += [k for m in ("A", "B", "FALLBACK") for (en, k) in heur[m] if en == e]
        choices = sample_configs(knobs, max_per_engine, listed) if info.status == "OK" else []
        space.engines.append({"engine": e, "status": info.status, "knobs": knobs,
                              "space": space_size(knobs) if info.status == "OK" else 0,
                              "tried": len(choices)})
        wanted = set(listed)
        for ch in choices:
            (first if ch in wanted else rest).append((e, ch))
    for e, ch in first + rest:
        cfg = EngineConfig(tag=config_tag(direction, e, ch), engine=e, knobs=[list(k) for k in ch])
        for m, lst in heur.items():
            if (e, ch) in lst:
                cfg.heuristic_ranks[m] = lst.index((e, ch)) + 1
        if time_budget_s is not None and time.perf_counter() - t0 > time_budget_s:
            cfg.status, space.budget_exhausted = "skipped: time budget", True
            space.configs.append(cfg)
            continue
        say(f"{direction}: engine {e}/{count - 1} {cfg.tag} ({time.perf_counter() - t0:.1f} s)")
        _run_config(search, opt, problem, direction, tensors, ref, cfg, kernels)
        space.configs.append(cfg)
    for r in legacy_rows:
        if r.kernels:
            space.legacy_map[f"{r.algo_name} ({r.math_type})"] = [
                c.tag for c in space.configs if same_kernels(c.kernels, r.kernels)]
    return space
