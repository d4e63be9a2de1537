"""The rank job: one process of a torchrun sweep (model/distributed.py). Each rank
measures its share of the unique problems on its own GPU into the results store; rank 0
merges them from the store. With ``consistency`` every rank measures every problem into
a sweep file of its own, and rank 0 reads them all, to compare identical GPUs. It returns
records and renders nothing."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, List, Optional

from ..core.capture import ModelSpec
from ..core.errors import ResourceError, UserError
from ..core.files import read_bytes, write_atomic
from ..core.options import ExploreOptions
from ..core.model_sweep import ModelSweep
from .events import Notify, notifier, quiet_progress
from . import lazy_measure
from .stores import StoreChoice, opened, saver, without_store
from .sweep import pytorch_run

__all__ = ["RankOutcome", "rank_sweep", "rank_file"]

DAY_S = 24 * 3600.0


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


def rank_sweep(spec: ModelSpec, world, options: ExploreOptions, *, profile: str = "quick",
               iterations: int = 20, store: Optional[StoreChoice] = None,
               consistency: bool = False, json_path: Optional[str] = None,
               progress: Optional[Callable[[str], None]] = None,
               notify: Optional[Notify] = None) -> RankOutcome:
    """This rank's part of a torchrun sweep of ``spec`` (``world``: distributed.World),
    on the GPU of its local rank, inside a process group that is closed on every way out.
    ``options`` as the profile set them. The results store is needed (the ranks' results
    travel through it); with ``consistency``, ``json_path`` too."""
    from ..model import distributed

    store = store or StoreChoice()
    if not store.use:
        raise UserError("--no-store: under torchrun the ranks' results travel through the "
                        "results store; give --store PATH (on a shared filesystem across "
                        "nodes)")
    if consistency and not json_path:
        raise UserError("--consistency needs --json PATH: each rank writes PATH.rankN.json "
                        "and rank 0 compares them")
    pipeline = lazy_measure.measuring()
    options = options.updated(device=world.local_rank)
    pipeline.native.require_gpu(world.local_rank)
    distributed.init(world, DAY_S)
    try:  # the process group is closed on every way out (else gloo aborts the process)
        return _in_group(spec, world, options, profile, iterations, store, consistency,
                         json_path, quiet_progress(progress), notifier(notify), pipeline)
    finally:
        distributed.finish()


def _in_group(spec, world, options, profile, iterations, choice, consistency, json_path,
              say, notify, pipeline) -> RankOutcome:
    from ..model import distributed
    from ..model.tracer import capture_model
    from ..model.run_modes import StoreCache, modes_of, run_model
    from ..model.explore_problems import sweep
    from .sweep import store_cache

    rank = world.rank
    distributed.check_devices(world, distributed.device_id(world.local_rank))
    cap = capture_model(spec, f"cuda:{world.local_rank}")
    with opened(choice, notify) as db:
        if db is None:
            raise ResourceError("under torchrun the results store is needed")
        env = pipeline.environment(world.local_rank)
        run, bench = None, None
        if options.pytorch and consistency:  # each GPU its own run, never another rank's
            run, bench = pytorch_run(cap, options, iterations, say, None)
        elif options.pytorch:
            # PyTorch's run of the model, its modes shared out between the ranks through
            # the store; then every rank reads all (a mode is read only under the reading
            # rank's own environment: another kind of GPU runs it again).
            n = len(modes_of(options))
            run_model(cap, options, iterations=iterations, progress=say,
                      cache=store_cache(db, env, cap, notify),
                      share=range(rank, n, world.size))
            why = distributed.barrier(world, DAY_S, "the end of PyTorch's run of the model")
            if why:
                say(f"{why}; the modes another rank did not store are run here")
            run, bench = pytorch_run(cap, options, iterations, say, StoreCache(
                db, env, cap.model.describe(), lambda e: without_store(notify, e)))
        shares = distributed.shard(cap.problems, world.size)
        mine = list(range(len(cap.problems))) if consistency else shares[rank]
        say(f"{len(mine)} of {len(cap.problems)} unique problems on GPU {world.local_rank}")
        mine_json = rank_file(json_path, rank) if consistency else None
        t0 = time.perf_counter()

        def measure(share):
            def cached(problem, one):
                return None if choice.refresh or consistency else db.lookup(
                    problem, env, one, partial=True)

            sweep(cap, options, cached=cached, bench=bench, profile=profile,
                  pytorch_run=run, only=share,
                  saver=lambda problem, one: saver(db, problem, one, notify),
                  progress=lambda done, total, msg: msg and say(f"{done}/{total} {msg}"),
                  save=(lambda sw: write_atomic(mine_json, sw.to_json() + "\n"))
                  if mine_json else (lambda sw: None))

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
        sw = distributed.merge(cap, options, lambda p, o: db.lookup(p, env, o), env,
                               profile, run, round(time.perf_counter() - t0, 3))
    return RankOutcome(rank, world.size, sweep=sw, errors=errors, barrier=why)
