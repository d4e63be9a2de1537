"""cuDNN 9 engine configs as data: knob spaces, the candidates to try, tags, PyTorch's
rules, and kernel matching. Pure Python (measure/engines.py drives the GPU)."""
from __future__ import annotations

import math
from typing import Iterable, List, Optional, Sequence, Tuple

from .logs import OPERATIONS, EngineTag, format_tag, parse_tag

__all__ = ["OPERATION_OF", "ATTEMPTS_PER_CONFIG", "Knobs", "knob_values", "space_size",
           "candidate_configs", "config_tag", "allowed_by_pytorch", "kernel_family",
           "parse_tags", "same_kernels", "match_kernels"]

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
    """PyTorch's Conv_v8 filters (filterEngineConfigs): configs that down-convert their
    inputs are never used; float32 with TF32 off excludes TENSOR_CORE configs;
    deterministic mode excludes NONDETERMINISTIC ones."""
    if "DOWN_CONVERT_INPUTS" in numeric_notes:
        return False
    if dtype == "float32" and tf32 is False and "TENSOR_CORE" in numeric_notes:
        return False
    if deterministic and "NONDETERMINISTIC" in numeric_notes:
        return False
    return True


def kernel_family(name: str) -> str:
    """A kernel's name without its tile configuration: configs of one engine that differ
    only in knobs launch kernels of one family."""
    return name.split("_tilesize")[0].split("<")[0]


def parse_tags(names: Iterable[str]) -> List[EngineTag]:
    out = []
    for n in names:
        try:
            out.append(parse_tag(n))
        except ValueError:
            continue
    return out


def same_kernels(a: Optional[Sequence[str]], b: Optional[Sequence[str]]) -> bool:
    """Two launches ran the same implementation: the same (non-empty) set of kernels."""
    return bool(a) and bool(b) and sorted(a) == sorted(b)


def match_kernels(kernels: Sequence[str], rows: Sequence) -> List[str]:
    """Legacy rows (with .kernels) whose launch runs exactly ``kernels``, as "ALGO (MATH)"."""
    return [f"{r.algo_name} ({r.math_type})" for r in rows if same_kernels(r.kernels, kernels)]
