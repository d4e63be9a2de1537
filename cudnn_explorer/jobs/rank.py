"""The rank job: one process of a torchrun sweep (model/distributed.py). Each rank
measures its share of the unique problems on its own GPU into the results store; rank 0
merges them from the store. With ``consistency`` every rank measures every problem into
a sweep file of its own, and rank 0 reads them all, to compare identical GPUs. It returns
records and renders nothing."""
from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Callable, List, Optional

from ..core.capture import ModelSpec
from ..core.errors import ResourceError, UserError
from ..core.files import read_bytes, write_atomic
from ..core.options import DAY_S, ExploreOptions
from ..core.model_sweep import ModelSweep
from .events import Notify, notifier, quiet_progress
from . import lazy_measure
from .stores import StoreChoice, needed_under_torchrun
from .sweep import SweepRun, SweepSettings

__all__ = ["RankOutcome", "rank_sweep", "rank_file"]



@dataclass(frozen=True)
class RankOutcome:
    """What one rank did. Rank 0 holds the merged ``sweep`` (or, with consistency, every
    rank's sweep in ``sweeps``); ``errors``: what failed on the way (this rank's share, a
    rank's file that could not be read); ``barrier``: on rank 0, why not every rank
    reached the end ("" when all did)."""

    rank: int
    world_size: int
    sweep: Optional[ModelSweep] = None
    sweeps: List[ModelSweep] = field(default_factory=list)
    errors: List[str] = field(default_factory=list)
    barrier: str = ""

    @property
    def ok(self) -> bool:
        """Whether this rank's part is complete: its share measured; on rank 0 every
        problem merged, or every rank's sweep read."""
        if self.rank != 0:
            return not self.errors
        if self.sweep is not None:
            return not self.sweep.missing
        return len(self.sweeps) == self.world_size and not self.barrier and not self.errors


def rank_file(json_path: str, rank: int) -> str:
    """The sweep file of ``rank`` under consistency: PATH.rankN.json."""
    return f"{json_path}.rank{rank}.json"


def rank_sweep(spec: ModelSpec, world, options: ExploreOptions,
               settings: Optional[SweepSettings] = None, *, consistency: bool = False,
               json_path: Optional[str] = None,
               progress: Optional[Callable[[str], None]] = None,
               notify: Optional[Notify] = None) -> RankOutcome:
    """This rank's part of a torchrun sweep of ``spec`` (``world``: distributed.World),
    on the GPU of its local rank, inside a process group that is closed on every way out.
    ``options`` as the settings' profile sets them (SweepRun; ``settings`` default: the
    quick profile, the default store). The results store is needed (the ranks' results
    travel through it); with ``consistency``, ``json_path`` too."""
    from ..model import distributed

    settings = settings or SweepSettings(store=StoreChoice())
    needed_under_torchrun(settings.store)
    if consistency and not json_path:
        raise UserError("--consistency needs --json PATH: each rank writes PATH.rankN.json "
                        "and rank 0 compares them")
    pipeline = lazy_measure.measuring()
    options = options.updated(device=world.local_rank)
    pipeline.native.require_gpu(world.local_rank)
    if consistency:  # each GPU measures every problem anew: none read from the store
        settings = replace(settings, store=replace(settings.store, refresh=True))
    say = quiet_progress(progress)
    with distributed.group(world, DAY_S), \
            SweepRun(spec, options, settings, notify=notify, say=say, start=False,
                     progress=lambda done, total, msg: msg and say(f"{done}/{total} {msg}")
                     ) as run:
        return _in_group(run, world, consistency, json_path, say)


def _in_group(run: SweepRun, world, consistency: bool, json_path: Optional[str],
              say) -> RankOutcome:
    from ..model import distributed
    from ..model.run_modes import modes_of

    rank, notify = world.rank, run.notify
    cap = run.capture(f"cuda:{world.local_rank}")
    db = run.store()
    if db is None:
        raise ResourceError("under torchrun the results store is needed")
    env = run.environment()
    if run.options.pytorch and consistency:  # each GPU its own run, never another rank's
        run.run_modes(keep=False)
    elif run.options.pytorch:
        # PyTorch's run of the model, its modes shared out between the ranks through the
        # store; then every rank reads all (a mode is read only under the reading rank's
        # own environment: another kind of GPU runs it again).
        n = len(modes_of(run.options))
        run.run_modes(share=range(rank, n, world.size), read=True)
        why = distributed.barrier(world, DAY_S, "the end of PyTorch's run of the model")
        if why:
            say(f"{why}; the modes another rank did not store are run here")
        run.run_modes(read=True)
    shares = distributed.shard(cap.problems, world.size)
    mine = list(range(len(cap.problems))) if consistency else shares[rank]
    say(f"{len(mine)} of {len(cap.problems)} unique problems on GPU {world.local_rank}")
    mine_json = rank_file(json_path, rank) if consistency else None
    t0 = time.perf_counter()
    swept = []

    def measure(share):
        swept[:] = [run.sweep(only=share, save=(
            lambda sw: write_atomic(mine_json, sw.to_json() + "\n")) if mine_json else None)]

    errors = [e for e in [distributed.run_share(world, mine, measure)] if e]
    for e in errors:
        notify("error", e)  # at once: the barrier can wait for a day
    why = distributed.barrier(world, DAY_S)
    if rank != 0:
        return RankOutcome(rank, world.size, errors=errors)
    if consistency:
        sweeps = []
        for r in range(world.size):
            try:
                sweeps.append(ModelSweep.from_json(read_bytes(rank_file(json_path, r),
                                                              "--json")))
            except UserError as e:
                errors.append(f"rank {r}'s sweep: {e}")
                notify("error", errors[-1])
        return RankOutcome(rank, world.size, sweeps=sweeps, errors=errors, barrier=why)
    sw = distributed.merge(cap, run.options, lambda p, o: db.lookup(p, env, o), env,
                           run.settings.profile, run.model_run,
                           round(time.perf_counter() - t0, 3))
    return RankOutcome(rank, world.size, sweep=sw, errors=errors, barrier=why)
