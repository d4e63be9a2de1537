"""Side by side across environments (GPUs, cuDNN or torch versions): per problem and
direction, what each environment's PyTorch picked with benchmark on, its best legacy
algorithm and its best engine config, with their times, and whether the environments
agree. Pure Python: runs on stored or saved results without a GPU."""
from __future__ import annotations

from typing import Dict, List, Tuple

from ..core.problem import DIRECTIONS, ConvProblem
from ..core.records import DirectionResult
from ..core.exploration import Environment
from ..core.choices import chosen
from .format import ELIDED, distinct_tags, fmt_ms, fmt_version, short_algo, table, wrap

__all__ = ["env_label", "render_compare", "shared_groups"]

_SHORT = {"fwd": "fwd", "bwd-data": "bwd-d", "bwd-filter": "bwd-f"}


def env_label(e: Environment) -> str:
    gpu = e.gpu_name.replace("NVIDIA ", "").replace("GeForce ", "")
    return (f"{gpu} cudnn{fmt_version(e.cudnn_runtime)} "
            f"torch{e.torch_version.split('+')[0]}")


def shared_groups(items: List[Tuple[ConvProblem, Environment, DirectionResult]]):
    """(shared, environments): per (problem, direction) measured in two or more
    environments, environment label -> its last saved DirectionResult, in problem and
    direction order; and every environment's label."""
    groups: Dict[Tuple, Dict[str, DirectionResult]] = {}
    for problem, env, d in items:
        key = (problem, d.direction)
        groups.setdefault(key, {})[env_label(env)] = d  # the last saved per environment
    shared = dict(sorted(((k, v) for k, v in groups.items() if len(v) > 1),
                         key=lambda kv: (kv[0][0].describe(), DIRECTIONS.index(kv[0][1]))))
    return shared, sorted({e for v in groups.values() for e in v})


def _env_columns(labels: List[str], width: int = 22) -> Dict[str, str]:
    """Each environment's label for the table's column: without the words every label
    shares (the same cuDNN and torch everywhere: the GPU names alone; the line above the
    table says them in full), cut to ``width`` with '~'."""
    words = [label.split(" ") for label in labels]
    common = set.intersection(*(set(w) for w in words)) if len(words) > 1 else set()
    out = {}
    for label, w in zip(labels, words):
        short = " ".join(x for x in w if x not in common) or label
        out[label] = short if len(short) <= width else short[:width - 1] + "~"
    return out


def render_compare(items: List[Tuple[ConvProblem, Environment, DirectionResult]]) -> str:
    """``items``: (problem, environment, direction) from any number of environments; the
    problems and directions seen in two or more environments are compared."""
    shared, envs = shared_groups(items)
    lines = wrap(f"{len(envs)} environment(s): " + "; ".join(envs))
    shown = _env_columns(envs)
    if not shared:
        lines.append("no problem and direction was measured in two or more environments: "
                     "nothing to compare")
        return "\n".join(lines) + "\n"
    rows, agree_pick, agree_engine, elided = [], 0, 0, False
    ids: Dict[ConvProblem, int] = {}
    for key, by_env in shared.items():
        first = key[0] not in ids
        n = ids.setdefault(key[0], len(ids) + 1)
        picks, engines = set(), set()
        found = {label: chosen(d) for label, d in by_env.items()}
        pick_tags = distinct_tags([c[0].engine_tag for c in found.values() if c[0]], 20)
        engine_tags = distinct_tags([c[2].tag for c in found.values() if c[2]], 18)
        elided |= any("~" in v.rstrip("~") for v in (*pick_tags.values(),
                                                       *engine_tags.values()))
        for i, (label, d) in enumerate(sorted(by_env.items())):
            pick, legacy, engine = found[label]
            picks.add((pick.engine_tag or pick.legacy_algo) if pick else None)
            engines.add(engine.tag if engine else None)
            rows.append([f"#{n}" if i == 0 and first else "",
                         _SHORT[key[1]] if i == 0 else "",
                         shown[label],
                         pick_tags[pick.engine_tag] if pick and pick.engine_tag else "-",
                         fmt_ms(d.pick_ms(pick)) if pick else "-",
                         short_algo(legacy.algo_name, legacy.math_type, 16) if legacy else "-",
                         fmt_ms(legacy.time) if legacy else "-",
                         engine_tags[engine.tag] if engine else "-",
                         fmt_ms(engine.time) if engine else "-"])
        agree_pick += len(picks) == 1 and None not in picks
        agree_engine += len(engines) == 1 and None not in engines
    lines.append(table(rows, headers=["#", "dir", "environment", "PyTorch's pick", "ms",
                                      "best legacy", "ms", "best engine", "ms"]))
    for problem, n in ids.items():
        lines += wrap(f"#{n}: {problem.describe()}", "  ")
    lines += wrap(f"PyTorch's benchmark pick is the same in every environment for "
                  f"{agree_pick} of {len(shared)} problem-directions; the best engine config "
                  f"for {agree_engine} (times are steady-state medians per call, each "
                  f"environment's own)")
    if elided:
        lines += wrap(ELIDED)
    return "\n".join(lines) + "\n"
