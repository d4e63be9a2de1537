"""The tune job: every problem-direction of a record (``record``'s file, or a misses file)
explored with the staged search through the results store, then one plan file of them
under the plan files' policies and filters (core.plans.plans_from, as ``plans write``).

Note [tune explores problems]: a record lists problem-directions; the pipeline explores
a problem in the directions it is given. So the record's problem-directions are grouped
by problem, and each problem is explored once, in exactly the directions recorded. What
the store holds (a finished direction of an interrupted run too) is not measured again.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

from ..core.errors import (ChildError, CudnnError, MissingDependencyError, ResourceError,
                           UserError)
from ..core.exploration import Environment
from ..core.options import DAY_S, ExploreOptions, flag, given_options, profile_name
from ..core.plans import POLICIES, PlanEnvironment, PlanFile, native_key, plans_from
from ..core.problem import DIRECTIONS, ConvProblem
from ..core.schema import utc_now
from ..core.version import __version__
from ..core.zero_code import ConvRecord, read_convs
from . import lazy_measure
from .events import Notify, check_callbacks, notifier
from .stores import StoreChoice, needed_under_torchrun, opened, saver

__all__ = ["tune", "tune_rank", "TuneResult", "TuneProblem", "problems_of"]

# Errors that stop one problem but not the others: cuDNN refusing it, its memory, a child.
_PER_PROBLEM = (CudnnError, ResourceError, ChildError, UserError)


@dataclass(frozen=True)
class TuneProblem:
    """One problem of a record, with the ``directions`` recorded for it (in DIRECTIONS
    order), their keys (Note [plan keys]) and the layers that ran them."""

    problem: ConvProblem
    directions: Tuple[str, ...]
    keys: Tuple[Tuple[int, ...], ...]
    layers: Tuple[str, ...] = ()


@dataclass(frozen=True)
class TuneResult:
    """What tune did: ``plans`` (the plan file to write: with ``add``, the old entries
    first, unchanged, then the new ones), the ``problems`` it was to explore, how many
    were ``done`` (explored or answered), how many directions were ``measured`` now and
    how many the store ``answered``, the entries ``kept`` from the old file, the
    ``unusable`` recorded keys and ``failed`` problems (one line each), and
    ``complete``: False where Ctrl-C cut it short (``plans`` then holds what finished).
    ``wall_s``: seconds, from the record read to the plans made."""

    plans: PlanFile
    problems: List[TuneProblem] = field(default_factory=list)
    done: int = 0
    measured: int = 0
    answered: int = 0
    kept: int = 0
    unusable: List[str] = field(default_factory=list)
    failed: List[str] = field(default_factory=list)
    complete: bool = True
    wall_s: float = 0.0

    @property
    def directions(self) -> int:
        return sum(len(p.directions) for p in self.problems)


def problems_of(record: ConvRecord, have: Sequence[Sequence[int]] = ()) -> \
        Tuple[List[TuneProblem], List[str]]:
    """(the record's problems, each with its recorded directions, in the record's order:
    most calls first; the problem-directions that are no problem, one line each), leaving
    out the keys in ``have`` (those a plan file covers already)."""
    skip = {tuple(k) for k in have}
    groups: Dict[ConvProblem, Dict[str, Tuple[Tuple[int, ...], List[str]]]] = {}
    unusable = []
    for c in record.convs:
        if c.problem is None or c.direction not in DIRECTIONS:
            unusable.append(f"{c.description}: {c.why or 'no problem recorded'}")
            continue
        if tuple(c.key) in skip:
            continue
        groups.setdefault(c.problem, {})[c.direction] = (tuple(c.key), list(c.layers))
    out = []
    for p, by_dir in groups.items():
        dirs = tuple(d for d in DIRECTIONS if d in by_dir)
        layers = []
        for d in dirs:
            layers += [n for n in by_dir[d][1] if n not in layers]
        out.append(TuneProblem(p, dirs, tuple(by_dir[d][0] for d in dirs), tuple(layers)))
    return out, unusable


def _record(record: Union[str, os.PathLike, ConvRecord]) -> Tuple[ConvRecord, str]:
    if isinstance(record, ConvRecord):
        return record, "a record"
    if not isinstance(record, (str, os.PathLike)):
        raise UserError(f"record {type(record).__name__}: valid: a record file's path or a "
                        f"ConvRecord")
    return read_convs(os.fspath(record)), os.fspath(record)


def _options(options: Optional[ExploreOptions], policy: str, profile: str) -> ExploreOptions:
    """The options of the exploration: the model sweep's ``profile`` over ``options``;
    PyTorch's children only where the policy needs its pick (Note [tune without
    PyTorch's children])."""
    if options is None:
        options = ExploreOptions.create(pytorch=policy == "pytorch")
    options = given_options(options).profiled(profile_name(profile), model=True)
    if policy == "pytorch" and not options.pytorch:
        raise UserError("policy 'pytorch' freezes PyTorch's own pick, which needs its "
                        "children: options with pytorch=True (drop --no-pytorch)")
    if not options.engines:
        raise UserError("tune pins engine configs: options with engines=True")
    return options


# Note [tune without PyTorch's children]: the "best" policy chooses among the re-timed
# engine configs alone (core.plans.choose), so by default tune starts none of PyTorch's
# children (on the H200 they are several seconds a problem); "pytorch" needs their pick.
# Without them the store's answers of a run with them (explore, model) are a superset of
# what tune needs, and are taken where tune's own options find none.


def _settings(old: PlanFile, policy: Optional[str], cap_mib: Optional[float],
              deterministic: Optional[bool], path: str) -> Tuple[str, Optional[float], bool]:
    """The policy and filters of an ``add`` to ``old``: its own, where not given; a given
    one that differs is refused (one file holds one policy)."""
    old_cap = None if old.max_workspace_bytes is None else old.max_workspace_bytes / 2**20
    cap = None if cap_mib is None else int(ExploreOptions.create(
        max_workspace_mib=cap_mib).max_workspace_mib * 2**20)
    given = [("--policy", policy, old.policy, policy),
             ("--max-workspace", cap, old.max_workspace_bytes, cap_mib),
             ("--deterministic", deterministic, old.deterministic_only, deterministic)]
    for flag, value, was, shown in given:
        if value is not None and value != was:
            had = old_cap if flag == "--max-workspace" else was
            raise UserError(f"{flag} {shown}: the plan file '{path}' was written with "
                            f"{flag} {had}; one file holds one policy: give its own or a "
                            f"new -o")
    return old.policy, old_cap, old.deterministic_only


def _resolved(add: Optional[str], policy: Optional[str], cap_mib: Optional[float],
              deterministic: Optional[bool]) -> Tuple[Optional[PlanFile], str,
                                                      Optional[float], Optional[bool]]:
    """The plan file ``add`` names (or None), and the policy and filters a tune writes
    with: an ``add``'s own (_settings), else as given, the policy "best" by default."""
    old = None
    if add is not None:
        from .plans import read_plans

        old = read_plans(add)
        policy, cap_mib, deterministic = _settings(old, policy, cap_mib, deterministic,
                                                   os.fspath(add))
    policy = "best" if policy is None else policy
    if policy not in POLICIES:
        raise UserError(f"policy {policy!r}: valid: {', '.join(POLICIES)}")
    return old, policy, cap_mib, deterministic


def tune(record: Union[str, os.PathLike, ConvRecord], options: Optional[ExploreOptions] = None,
         *, policy: Optional[str] = None, max_workspace_mib: Optional[float] = None,
         deterministic: Optional[bool] = None, profile: str = "quick", store=True,
         refresh: bool = False, add: Optional[str] = None,
         progress: Optional[Callable[[str], None]] = None, notify: Optional[Notify] = None,
         bench=None, only: Optional[Sequence[int]] = None) -> TuneResult:
    """Explore every problem-direction of ``record`` (a record or misses file's path, or a
    ConvRecord) and return the TuneResult, whose ``plans`` is the plan file (times in ms,
    sizes in bytes); the caller writes it.

    ``policy`` ("best" by default, or "pytorch"), ``max_workspace_mib`` and
    ``deterministic`` choose each plan as ``plans write`` does. ``options``: the
    exploration's, under the model sweep's ``profile`` ("quick" or "thorough"); by
    default PyTorch's children run only for the "pytorch" policy. ``store``: as explore()
    takes it (default True: the default store): what it holds is not measured again
    (unless ``refresh``), and each direction is kept there as it finishes. ``add``: an
    existing plan file's path: only the problem-directions it lacks are explored, and
    ``plans`` holds its entries unchanged, then the new ones; its policy and filters
    are kept (given ones that differ are refused), and a file from another environment
    is refused. ``progress`` hears "problem i/N: ..." lines. Ctrl-C raises
    KeyboardInterrupt with ``partial``: the TuneResult of what finished (``complete``
    False). ``bench``: the measuring bench (tests give a fake one). ``only``: explore
    only the record's problems at these positions (of ``problems_of``'s list), the plans
    then hold those: a rank's share under torchrun (tune_rank)."""
    check_callbacks(progress=progress, notify=notify)
    rec, name = _record(record)
    if deterministic is not None:
        deterministic = flag(deterministic, "deterministic")
    old, policy, max_workspace_mib, deterministic = _resolved(add, policy, max_workspace_mib,
                                                              deterministic)
    if max_workspace_mib is not None:  # checked as the option is (a number >= 0)
        max_workspace_mib = ExploreOptions.create(
            max_workspace_mib=max_workspace_mib).max_workspace_mib
    cap = None if max_workspace_mib is None else int(max_workspace_mib * 2**20)
    options = _options(options, policy, profile)
    problems, unusable = problems_of(rec, [native_key(e) for e in old.entries] if old else ())
    if not rec.convs or (not problems and old is None):
        raise UserError(f"record '{name}': no problem-direction to tune"
                        + (f" ({len(unusable)} recorded, none a convolution the op keys: "
                           f"{unusable[0]})" if unusable else " (it recorded no convolution)"))
    choice = StoreChoice.of(store, refresh)
    notify = notifier(notify)
    say = progress or (lambda msg: None)
    own = bench is None
    if own:
        lazy_measure.require_driver()  # no GPU: one line, before torch is imported
    t0 = time.perf_counter()
    items: List[Tuple] = []
    counts = {"done": 0, "measured": 0, "answered": 0}
    failed: List[str] = []
    env: Optional[Environment] = None

    def result(complete: bool) -> TuneResult:
        here = env or (bench.environment() if bench is not None else None)
        plans = _plan_file(items, here, old, name, policy, cap, bool(deterministic))
        return TuneResult(plans=plans, problems=problems, done=counts["done"],
                          measured=counts["measured"],
                          answered=counts["answered"], kept=len(old.entries) if old else 0,
                          unusable=unusable, failed=list(failed), complete=complete,
                          wall_s=round(time.perf_counter() - t0, 3))

    if not problems:  # --add of what the file covers already: nothing to explore
        return result(True)
    pipeline = lazy_measure.measuring()
    if own:
        bench = _gpu_bench(options.device)
    try:
        env = bench.environment()
        if old is not None:
            diff = old.environment.differences(PlanEnvironment.of(env))
            if diff:
                raise UserError(f"--add: the plan file '{add}' is from another environment: "
                                f"{'; '.join(diff)}; tune into a new -o here")
        with opened(choice, notify) as db:
            stored = _stored(db, env, choice.refresh, notify)
            for i, tp in enumerate(problems):
                if only is not None and i not in only:
                    continue
                head = f"problem {i + 1}/{len(problems)}: {tp.problem.describe()}"
                say(head)
                try:
                    exp = _explored(pipeline, bench, stored, tp, options,
                                    lambda m, h=head: say(f"{h}: {m}"), counts)
                except _PER_PROBLEM as e:
                    failed.append(f"{tp.problem.describe()}: {type(e).__name__}: {e}")
                    notify("warning", f"{head}: not tuned: {e}")
                    continue
                items.extend((tp.problem, d, list(tp.layers), 0) for d in exp.directions)
                counts["done"] += 1
    except KeyboardInterrupt as e:
        e.partial = result(False)
        raise
    finally:
        if own:
            bench.close()
    return result(True)


def _gpu_bench(device: int):
    """The bench a tune owns on GPU ``device``, its engine worker kept for every
    direction until it is closed; MissingDependencyError where the extension has no
    cudnn-frontend (a plan pins an engine config)."""
    if not lazy_measure.frontend_built(device):
        raise MissingDependencyError("tune pins engine configs, and this build of the "
                                     "extension has no cudnn-frontend: pip install "
                                     "nvidia-cudnn-frontend, then rebuild")
    return lazy_measure.measuring().GpuBench(device, keep_worker=True)


def _stored(db, env: Environment, refresh: bool, notify: Notify):
    """Where tune's problems are kept, as a model sweep's are (a
    model.explore_problems.StoredProblems): ``lookup(problem, options)`` gives the
    directions the store ``db`` holds for ``problem`` measured on ``env`` with
    ``options``, or with the same and PyTorch's children where those hold more (Note
    [tune without PyTorch's children]); None with no store, or with ``refresh``.
    ``saver(problem, options)`` keeps each direction as it finishes (jobs.stores.saver,
    whose warnings go to ``notify``)."""
    from ..model.explore_problems import StoredProblems

    def lookup(problem: ConvProblem, one: ExploreOptions):
        if db is None or refresh:
            return None
        found = db.lookup(problem, env, one, partial=True)
        if (found is None or len(found.directions) < len(one.directions)) and not one.pytorch:
            wider = db.lookup(problem, env, one.updated(pytorch=True), partial=True)
            found = wider if wider is not None and (
                found is None or len(wider.directions) > len(found.directions)) else found
        return found

    return StoredProblems(lookup, lambda problem, one: saver(db, problem, one, notify))


def _explored(pipeline, bench, stored, tp: TuneProblem, options: ExploreOptions, progress,
              counts):
    """``tp``'s exploration in its recorded directions: what ``stored`` (_stored) holds,
    the rest measured now (each direction kept there as it finishes)."""
    one = options.updated(directions=tp.directions)
    found = stored.lookup(tp.problem, one)
    have = {d.direction: d for d in (found.directions if found else [])}
    missing = tuple(d for d in tp.directions if d not in have)
    counts["answered"] += len(tp.directions) - len(missing)
    if not missing:
        progress("answered from the results store")
        return found
    rest = one.updated(directions=missing)
    new = pipeline.explore(tp.problem, rest, progress=progress, bench=bench,
                           on_direction=stored.saver(tp.problem, rest))
    counts["measured"] += len([d for d in new.directions if not d.error])
    have.update({d.direction: d for d in new.directions})
    return dataclasses.replace(new, directions=[have[d] for d in tp.directions if d in have])


def _plan_file(items, env: Optional[Environment], old: Optional[PlanFile], name: str,
               policy: str, cap: Optional[int], deterministic: bool) -> PlanFile:
    """The plan file of ``items`` (with ``old``'s entries first, unchanged, and its
    environment where ``env`` was never read)."""
    if env is None and old is None:
        raise UserError("tune: no environment to write plans for (nothing explored)")
    if env is not None:
        new = plans_from(items, env, f"tune '{name}'", policy, cap, deterministic,
                         __version__, utc_now())
    else:
        new = PlanFile(environment=old.environment, policy=policy, max_workspace_bytes=cap,
                       deterministic_only=deterministic, tool_version=__version__,
                       created=utc_now())
    if old is None:
        return new
    seen = {tuple(native_key(e)) for e in old.entries}
    added = [e for e in new.entries if tuple(native_key(e)) not in seen]
    return dataclasses.replace(new, environment=old.environment,
                               entries=list(old.entries) + added,
                               source=f"{old.source}; tune --add '{name}'" if old.source
                               else f"tune --add '{name}'",
                               skipped=list(old.skipped) + list(new.skipped))


# Note [tune spread over ranks]: under torchrun each rank tunes a share of the record's
# problems (distributed.shard: the costliest first, onto the least loaded rank) on its own
# GPU, into the results store, which the ranks share as a model sweep's do; after a gloo
# barrier rank 0 tunes the whole record once more. That pass answers every problem a rank
# stored (same environment: identical GPUs) and measures here only what is missing (a rank
# that failed, or a GPU of another kind), so the one plan file is complete either way,
# as a second run of the same command would be.


def tune_rank(record, world, options: Optional[ExploreOptions] = None,
              **kw) -> Tuple[Optional[TuneResult], str]:
    """This rank's part of a tune under torchrun (``world``: distributed.World), on the
    GPU of its local rank (Note [tune spread over ranks]). ``kw``: tune()'s keywords; the
    results store is needed. Returns (rank 0: the whole record's TuneResult, whose plans
    the caller writes; another rank: its share's, nothing to write, or None where its
    share failed; what went wrong: this rank's error, or on rank 0 why not every rank
    reached the barrier; "" when nothing did)."""
    from ..model import distributed

    choice = StoreChoice.of(kw.pop("store", True), kw.pop("refresh", False))
    needed_under_torchrun(choice)
    rec, _ = _record(record)
    deterministic = kw.get("deterministic")
    old, policy, _, _ = _resolved(kw.get("add"), kw.get("policy"), kw.get("max_workspace_mib"),
                                  None if deterministic is None else
                                  flag(deterministic, "deterministic"))
    problems, _ = problems_of(rec, [native_key(e) for e in old.entries] if old else ())
    # the default options as tune() makes them: PyTorch's children for the policy in force
    # (an add's own, where given)
    options = (options or ExploreOptions.create(pytorch=policy == "pytorch")
               ).updated(device=world.local_rank)
    share = distributed.shard(problems, world.size)[world.rank]
    mine: List[TuneResult] = []
    lazy_measure.measuring().native.require_gpu(world.local_rank)  # one line, exit 3
    # one bench for rank 0's two passes: its engine worker starts once, where needed
    own = kw.get("bench") is None
    if own:
        kw["bench"] = _gpu_bench(world.local_rank)
    try:
        with distributed.group(world, DAY_S):
            error = distributed.run_share(world, share, lambda s: mine.append(
                tune(record, options, only=s, store=choice, **kw)) if s else None)
            why = distributed.barrier(world, DAY_S, "the end of the ranks' shares")
            if world.rank != 0:
                return (mine[0] if mine else None), error
            # every problem: what the ranks stored is read (--refresh measured it anew)
            final = dataclasses.replace(choice, refresh=False)
            return tune(record, options, store=final, **kw), error or why
    finally:
        if own:
            kw["bench"].close()
