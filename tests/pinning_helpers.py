"""Plan files for GPU tests of the pinned op, made from cuDNN's own heuristics (no
measuring): the config at a given rank of heuristic mode A for each problem-direction,
built once on real tensors so that the tests know it builds and what cuDNN notes on it."""
import functools

from cudnn_explorer.core.logs import parse_tag
from cudnn_explorer.core.plans import PlanEntry, PlanEnvironment, PlanFile, PlanKey

PREFIX = {"fwd": "ConvFwd", "bwd-data": "ConvBwdData", "bwd-filter": "ConvBwdFilter"}


@functools.lru_cache(maxsize=None)
def heuristic_configs(problem, direction, limit=3):
    """[(tag, numeric notes)] of the configs heuristic mode A lists for one direction of
    ``problem`` that build on this GPU, best first (at most ``limit``)."""
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.tensors import make_tensors, native_problem

    tensors = make_tensors(problem, direction)
    search = native.engine_search(direction, native_problem(problem, tensors))
    out = []
    for name in search.heuristics("A"):  # each build may compile an engine: stop early
        tag = f"{PREFIX[direction]}_{name}"
        t = parse_tag(tag)
        built = search.build(t.engine, list(t.knobs))
        if built.status == "built":
            out.append((tag, list(built.numeric_notes)))
        if len(out) >= limit:
            break
    return tuple(out)


def entry(problem, direction, tag, notes=(), deterministic=False):
    t = parse_tag(tag)
    return PlanEntry(key=PlanKey.of(problem, direction, deterministic), problem=problem,
                     tag=tag, engine=t.engine, knobs=[list(k) for k in t.knobs],
                     numeric_notes=list(notes), why="heuristic mode A (test)")


def plan_file(entries, environment=None):
    return PlanFile(environment=environment or PlanEnvironment(), entries=list(entries),
                    source="tests")


def heuristic_plans(problems, rank=0, directions=("fwd", "bwd-data", "bwd-filter"),
                    accept=None, limit=None):
    """A PlanFile with, for each problem and direction, the heuristic config at ``rank``
    (the last one when fewer build) among those ``accept(notes)`` allows."""
    entries = []
    for p in problems:
        for d in directions:
            n = limit or (3 if accept is None else 12)
            configs = [c for c in heuristic_configs(p, d, n) if accept is None or accept(c[1])]
            if configs:
                tag, notes = configs[min(rank, len(configs) - 1)]
                entries.append(entry(p, d, tag, notes))
    return plan_file(entries)


# Convolutions for the autograd tests, float64: name: (input shape, weight shape, stride,
# padding, dilation, transposed, output_padding, groups)
AUTOGRAD_CASES = {
    "forward": ((2, 3, 6, 6), (4, 3, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 1),
    "strided": ((2, 2, 7, 6), (3, 2, 3, 2), [2, 1], [1, 0], [1, 1], False, [0, 0], 1),
    "transposed": ((2, 4, 4, 4), (4, 3, 3, 3), [2, 2], [1, 1], [1, 1], True, [1, 1], 1),
    "grouped": ((2, 4, 5, 5), (6, 2, 3, 3), [1, 1], [1, 1], [1, 1], False, [0, 0], 2),
    "dilated": ((2, 2, 7, 7), (3, 2, 3, 3), [1, 1], [2, 2], [2, 2], False, [0, 0], 1),
    "1-D": ((2, 3, 9), (4, 3, 3), [1], [1], [1], False, [0], 1),
    "3-D": ((1, 2, 4, 4, 4), (2, 2, 3, 3, 3), [1, 1, 1], [1, 1, 1], [1, 1, 1], False,
            [0, 0, 0], 1),
    "transposed-grouped": ((1, 4, 3, 3), (4, 1, 2, 2), [2, 2], [0, 0], [1, 1], True, [0, 0],
                           2),
}
