"""Model sweeps over several GPUs under torchrun: one process per GPU.

``torchrun --nproc-per-node N -m cudnn_explorer model ...`` (and ``--nnodes``) starts one
process per GPU. Each rank measures on its own GPU (LOCAL_RANK) a share of the unique
problems, balanced by estimated cost (longest first, onto the least loaded rank), and
saves each direction in the results store as it finishes (one WAL file, safe under
concurrent writers; on several nodes, a --store on a shared filesystem). A gloo barrier
with a generous timeout waits for every rank; rank 0 then merges from the store, not
through object collectives, and renders the one report. Problems a failed rank did not
finish are named; running the same command again measures only those.

Two ranks on one GPU would time each other's kernels, so ranks that share a device are
refused before anything is measured. With ``--consistency`` every rank runs every problem
and writes its own sweep file; rank 0 compares identical GPUs.
"""
from __future__ import annotations

import contextlib
import datetime
import os
import socket
from dataclasses import dataclass, replace
from typing import Callable, List, Optional, Sequence

from ..core import analysis
from ..core.capture import Capture, UniqueConv
from ..core.errors import ExplorerError, ResourceError, UserError, first_line
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.exploration import Environment, Exploration
from ..core.schema import utc_now
from ..core.model_sweep import ModelSweep, SweepEntry
from ..core.version import __version__

__all__ = ["World", "world_from_env", "estimated_cost", "shard", "init", "finish", "check_devices",
           "barrier", "merge", "run_share"]


@dataclass(frozen=True)
class World:
    rank: int
    local_rank: int
    size: int


def world_from_env(env=os.environ) -> Optional[World]:
    """The torchrun world of this process, or None when it runs alone (WORLD_SIZE unset or
    1): then everything behaves as without torchrun."""
    try:
        size = int(env.get("WORLD_SIZE", "1"))
        if size <= 1:
            return None
        return World(int(env["RANK"]), int(env.get("LOCAL_RANK", env["RANK"])), size)
    except (KeyError, ValueError):
        raise UserError("torchrun's RANK, LOCAL_RANK and WORLD_SIZE are not all set to "
                        "integers; start the sweep with torchrun") from None


def estimated_cost(u: UniqueConv) -> float:
    """A problem's expected share of a sweep's time: each direction costs a fixed part
    (Find, engine configs, PyTorch's picks) and a part that grows with its FLOPs (the
    kernels timed); the unit is arbitrary, only the ratios matter."""
    return sum(1.0 + analysis.flops(u.problem, d) / 1e12 for d in u.directions)


def shard(problems: Sequence[UniqueConv], n: int) -> List[List[int]]:
    """Problem indices per rank: the costliest first, each onto the least loaded rank
    (ties: the lower rank), each share in capture order. Deterministic."""
    load = [0.0] * n
    shares: List[List[int]] = [[] for _ in range(n)]
    order = sorted(range(len(problems)), key=lambda i: (-estimated_cost(problems[i]), i))
    for i in order:
        r = min(range(n), key=lambda k: (load[k], k))
        shares[r].append(i)
        load[r] += estimated_cost(problems[i])
    return [sorted(s) for s in shares]


def init(world: World, timeout_s: float, init_method: Optional[str] = None) -> None:
    """The gloo process group (CPU only: no NCCL, no GPU memory) for the barrier."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=init_method or "env://", rank=world.rank,
                            world_size=world.size,
                            timeout=datetime.timedelta(seconds=timeout_s))


@contextlib.contextmanager
def group(world: World, timeout_s: float, init_method: Optional[str] = None):
    """This rank inside the gloo process group (init()), the ranks' GPUs checked to be
    distinct (check_devices), the group closed on every way out (finish(): else gloo's
    threads abort the process at exit)."""
    init(world, timeout_s, init_method)
    try:
        check_devices(world, device_id(world.local_rank))
        yield
    finally:
        finish()


def finish() -> None:
    """Close the process group, when there is one (a rank that leaves with it open is
    aborted by gloo's threads at exit)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def check_devices(world: World, device_id: str) -> None:
    """UserError on every rank when two ranks run on one GPU (``device_id``: the host and
    the GPU's UUID); only this small identity travels between the ranks."""
    import torch.distributed as dist

    ids: List[Optional[str]] = [None] * world.size
    dist.all_gather_object(ids, device_id)
    seen: dict = {}
    for r, d in enumerate(ids):
        if d in seen:
            raise UserError(f"ranks {seen[d]} and {r} would both run on {d}: two timing "
                            f"processes on one GPU time each other's kernels; start at most "
                            f"one process per GPU (torchrun --nproc-per-node <= the GPUs "
                            f"each node has)")
        seen[d] = r


def device_id(local_rank: int) -> str:
    import torch

    props = torch.cuda.get_device_properties(local_rank)
    uuid = str(getattr(props, "uuid", "")) or f"cuda:{local_rank}"
    return f"{props.name} {uuid} on {socket.gethostname()}"


def barrier(world: World, timeout_s: float, what: str = "the end of the sweep") -> str:
    """Wait for every rank to reach ``what``. On rank 0, "" when all arrived, else why not
    (which rank failed, as gloo's monitored barrier reports it); other ranks return ""."""
    import torch.distributed as dist

    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=timeout_s),
                               wait_all_ranks=True)
    except RuntimeError as e:
        if world.rank == 0:
            return first_line(e)
        raise ResourceError(f"rank {world.rank}: the other ranks did not reach {what}: "
                            f"{first_line(e, 200)}") from None
    return ""


def run_share(world: World, share: List[int], measure: Callable[[List[int]], None]) -> str:
    """Measure this rank's share; an error stops this rank's work, not the barrier every
    rank must reach. Returns the error ("" when none)."""
    try:
        measure(share)
    except ExplorerError as e:
        return f"rank {world.rank}: {type(e).__name__}: {e}"
    return ""


def merge(capture: Capture, options: ExploreOptions,
          lookup: Callable[[ConvProblem, ExploreOptions], Optional[Exploration]],
          environment: Environment, profile: str, pytorch_run=None,
          wall_s: Optional[float] = None) -> ModelSweep:
    """Rank 0's sweep from the store: every problem whose directions are all stored; the
    rest are missing (the sweep is then incomplete and says which)."""
    entries = []
    for i, u in enumerate(capture.problems):
        exp = lookup(u.problem, replace(options, directions=tuple(u.directions)))
        if exp is not None:
            entries.append(SweepEntry(i, exp))
    opts = options.to_dict()
    opts.pop("directions", None)
    return ModelSweep(capture=capture, entries=entries, options=opts, profile=profile,
                      environment=environment,
                      complete=len(entries) == len(capture.problems),
                      tool_version=__version__,
                      created=utc_now(),
                      wall_s=wall_s, pytorch_run=pytorch_run)
