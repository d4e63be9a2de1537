"""Sweep a captured model: explore every unique problem in the directions the model runs.

Each problem is explored with the same ExploreOptions (its directions aside) through the
per-problem pipeline, PyTorch's own picks included. After each problem the sweep so far is
handed to ``save`` (the CLI writes it atomically), so Ctrl-C or a kill loses only the
problem in flight; an interrupted sweep is marked incomplete and says which are missing.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Optional, Sequence

from ..core.capture import Capture
from ..core.errors import ChildError, CudnnError, ExplorerError, ResourceError, UserError
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.exploration import Exploration
from ..core.schema import utc_now
from ..core.model_sweep import ModelSweep, SweepEntry
from ..core.version import __version__
from ..measure import pipeline

__all__ = ["sweep", "StoredProblems"]

# Errors that stop one problem but not the sweep: cuDNN refusing it, its memory, a child.
_PER_PROBLEM = (CudnnError, ResourceError, ChildError, UserError)


@dataclasses.dataclass(frozen=True)
class StoredProblems:
    """Where a sweep's problems are kept: ``lookup(problem, options)`` gives the
    directions already measured (the results store, also an interrupted run's part of a
    problem), ``saver(problem, options)`` explore()'s on_direction, which keeps each
    direction as soon as it is done. The default keeps nothing. The tune job keeps its
    problems the same way (jobs/tune.py)."""

    lookup: Callable[[ConvProblem, ExploreOptions], Optional[Exploration]] = \
        lambda p, o: None
    saver: Callable[[ConvProblem, ExploreOptions], Optional[Callable]] = lambda p, o: None


def sweep(capture: Capture, options: ExploreOptions,
          save: Callable[[ModelSweep], None] = lambda s: None,
          progress: Optional[Callable[[int, int, str], None]] = None,
          bench=None, stored: StoredProblems = StoredProblems(), profile: str = "thorough",
          only: Optional[Sequence[int]] = None) -> ModelSweep:
    """Explore ``capture``'s unique problems in order; ``save`` hears the sweep after each
    one, ``progress(done, total, message)`` every step. ``stored`` says what is measured
    already (only the rest is measured) and keeps what finishes. ``bench``: the measuring
    bench (a ModelBench gives the pipeline PyTorch's picks from its run of the model).
    ``profile`` names how ``options`` were chosen ("quick" or "thorough"). ``only``:
    explore just these problem indices (a rank's share of a distributed sweep). A missing
    GPU or extension stops the sweep (MissingDependencyError); other errors are recorded
    per problem. The sweep holds no run of the whole model: its owner adds it
    (jobs.sweep.SweepRun)."""
    bench = bench or pipeline.GpuBench(options.device, keep_worker=True)
    env = bench.environment()
    created = utc_now()
    opts = options.to_dict()
    opts.pop("directions", None)
    entries = []
    t0 = time.perf_counter()
    todo = list(range(len(capture.problems))) if only is None else sorted(set(only))
    total = len(todo)

    def snapshot(complete: bool) -> ModelSweep:
        return ModelSweep(capture=capture, entries=list(entries), options=opts,
                          profile=profile, environment=env, complete=complete,
                          tool_version=__version__, created=created,
                          wall_s=round(time.perf_counter() - t0, 3))

    say = progress or (lambda done, n, msg: None)
    try:
        for k, i in enumerate(todo):
            u = capture.problems[i]
            one = options.updated(directions=tuple(u.directions))
            start = time.perf_counter()
            say(k, total, f"problem {i + 1}/{len(capture.problems)}: "
                          f"{', '.join(u.layers[:2]) or '?'}")
            try:
                found = stored.lookup(u.problem, one)
                have = {d.direction: d for d in (found.directions if found else [])}
                missing = [d for d in one.directions if d not in have]
                exp = found
                if missing:  # only what is not stored yet: nothing finished runs twice
                    rest = one.updated(directions=tuple(missing))
                    new = pipeline.explore(u.problem, rest, bench=bench,
                                           progress=lambda m, k=k: say(k, total, m),
                                           on_direction=stored.saver(u.problem, rest))
                    have.update({d.direction: d for d in new.directions})
                    exp = dataclasses.replace(
                        new, directions=[have[d] for d in one.directions])
                entry = SweepEntry(i, exp, "", round(time.perf_counter() - start, 3))
            except _PER_PROBLEM as e:
                entry = SweepEntry(i, None, f"{type(e).__name__}: {e}",
                                   round(time.perf_counter() - start, 3))
            entries.append(entry)
            save(snapshot(complete=False))
            say(k + 1, total, "")
    except (KeyboardInterrupt, ExplorerError):
        save(snapshot(complete=False))  # everything finished is kept
        raise
    finally:
        bench.close()  # its engine worker
    done = snapshot(complete=True)
    save(done)
    return done
