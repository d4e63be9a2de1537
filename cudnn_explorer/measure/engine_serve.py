"""The engine worker's process: ``python -m cudnn_explorer.measure.engine_serve --serve``
takes one job per line on its stdin and explores that direction's engine configs
(measure/engines.py), writing its events where the job says; the parent, its watchdog and
the protocol are in measure/engine_worker.py."""
from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, replace
from typing import Callable, Optional

from ..core.errors import ExplorerError, ResourceError
from ..core.options import TimingSpec
from ..core.problem import ConvProblem
from ..core.records import AlgoResult, EngineSpace
from .procs import quick_exit
from .search_inputs import DirectionData, SearchSettings, Supervision

__all__ = ["run", "main", "JobFields"]


@dataclass(frozen=True)
class JobFields:
    """What a worker job's spec says of its data, read once (run() and _ahead() work
    from it; a held job's go changes none of it, engine_worker.HELD_FIELDS): the
    ``problem`` and its ``direction``, the GPU (``device``) and the ``seed`` its tensors
    are made with, whether its configs are checked (``check``: a reference is made) and
    whether its search samples the knob space (``sample``)."""

    problem: ConvProblem
    direction: str
    device: int
    seed: int
    check: bool
    sample: bool

    @classmethod
    def read(cls, spec: dict) -> "JobFields":
        """The fields of ``spec``, with their defaults where it has none."""
        return cls(ConvProblem.from_dict(spec["problem"]), spec["direction"],
                   int(spec.get("device", 0)), int(spec.get("seed", 0)),
                   bool(spec.get("check", True)), bool(spec.get("sample", True)))


def run(spec: dict, emit: Callable[[dict], None], setup=None, search=None,
        go: Optional[Callable[[], Optional[dict]]] = None, hangs=None
        ) -> Optional[EngineSpace]:
    """The worker's job: explore one direction, emitting events (the caller emits the
    space at the end). ``setup(problem,
    direction, device, seed, check)`` returns (native_problem, tensors, ref); by default
    the GPU tensors and reference of tensors.make_tensors / tensors.reference (the
    parent's seed, so the same data). ``search`` replaces the native EngineSearch (tests).
    A job with "hold" (Note [engine search ahead]) does what needs no GPU first, then
    waits for ``go()``: the rest of its spec, or None (the parent cancelled it: None is
    returned). ``hangs(direction, device)``: the rule of configs known to hang
    (core/hangs.py): a staged search does not sample them, one that is not gives their
    launches a shorter limit; default, on the GPU (no ``search`` given), the rule for the
    cuDNN loaded and the GPU."""
    from . import engines

    if hangs is None and search is None:  # before a held job makes its own search
        hangs = _known_hangs

    job = JobFields.read(spec)
    d, sample = job.direction, job.sample
    kernels = search is None and sample
    prepared = engines.PreparedSearch(search)
    ahead_s = None
    if spec.get("hold") and go is not None:
        t0 = time.perf_counter()
        prepared, ready = _ahead(job, spec, emit, setup, search)
        ahead_s = time.perf_counter() - t0
        more = go()
        if more is None:
            return None
        spec = {**spec, **more}
        native, tensors, ref = ready()
    else:
        native, tensors, ref = (setup or _gpu_setup)(job.problem, d, job.device, job.seed,
                                                     job.check)
    settings = SearchSettings(
        legacy_rows=[AlgoResult.from_dict(r) for r in spec.get("legacy_rows", [])],
        max_per_engine=int(spec.get("max_per_engine", 8)),
        time_budget_s=spec.get("time_budget_s"), timing=TimingSpec(**spec["timing"]),
        # Without sampling (a model's quick profile) kernels are not read: that profile
        # maps no legacy algorithm to configs (docs/method.md).
        kernels=kernels, preferred_tags=spec.get("preferred_tags", []), sample=sample,
        staged=bool(spec.get("staged", False)), finalist_tags=spec.get("finalist_tags"),
        only_preferred=bool(spec.get("only_preferred")),
        skip_known_hangs=bool(spec.get("staged", False)))
    supervision = Supervision(
        progress=lambda m: emit({"say": m}), on_event=emit, prior=spec.get("prior"),
        known_hang=hangs(d, job.device) if hangs is not None and sample else None)
    space = engines.explore_engines(DirectionData(job.problem, d, native, tensors, ref),
                                    settings, supervision, prepared)
    if ref is not None and ref.device.type == "cpu":  # Note [reference on the CPU]
        space = replace(space, reference_on_cpu=True)
    return space if ahead_s is None else replace(space, ahead_s=ahead_s)


def _known_hangs(direction: str, device: int):
    """core.hangs' rule for the cuDNN loaded here and the GPU ``device`` (Note [known
    hangs]): a staged search samples none of the configs it names, and the watchdog gives
    those tried a shorter limit."""
    import torch

    from ..core.hangs import hang_rule

    return hang_rule(direction, int(torch.backends.cudnn.version() or 0),
                     tuple(torch.cuda.get_device_capability(device)))


# Note [engine search ahead]: a direction's engine search starts with work that needs no
# GPU time: the operation graph, the heuristic modes' lists, the engines' knobs, and the
# plans of the configs it always tries (run-time compiled ones compile here). In the
# H200's ResNet-50 sweep these took about 0.1 s a direction, the plan builds 2.3-2.7 s in
# all, while the worker waited for the parent's legacy rows (0.23 s a direction). So the
# parent hands the job over before its legacy rows, marked "hold": the worker allocates
# the tensors (no fill: no kernel runs), lists and builds, says {"held": true}, and waits
# for one line, {"go": rest of the spec} once the legacy rows are done (then it fills the
# tensors and makes the reference, and times), or {"cancel": true}. Nothing it does
# meanwhile launches a kernel, so the legacy rows' timing has the GPU to itself; a
# build that hangs or crashes is seen, and recorded, once the parent reads the events
# after its go. The parent holds a job only while the GPU has room for both directions'
# tensors beside KEEP_WORKER_FREE_BYTES (measure/pipeline.py).
def _ahead(job: JobFields, spec: dict, emit, setup, search):
    """A held job's work ahead of its go (run()'s job ``spec``, ``job`` its fields as read
    there): (engines.PreparedSearch: the search, its listing and prebuilt plans, ready),
    where ready() fills the tensors and makes the reference: (native problem, tensors,
    ref)."""
    from . import engines
    from .tensors import filled_direction_data, make_tensors, native_problem

    problem, d, device, seed, check = (job.problem, job.direction, job.device, job.seed,
                                       job.check)
    tensors = prob = None
    if search is None:
        import torch

        from . import native

        torch.cuda.set_device(device)
        tensors = make_tensors(problem, d, device, seed, fill=False)
        prob = native_problem(problem, tensors)
        emit({"say": f"{d}: building the operation graph"})
        search = native.engine_search(d, prob)
    listing = engines.list_space(search, d, spec.get("preferred_tags", []),
                                 int(spec.get("max_per_engine", 8)), job.sample,
                                 lambda m: emit({"say": m}))
    prebuilt = engines.prebuild(search, d, listing, bool(spec.get("only_preferred")), emit)
    emit({"held": True})

    def ready():
        if setup is not None:
            return setup(problem, d, device, seed, check)
        ref, _ = filled_direction_data(problem, d, tensors, device, seed, check)
        return prob, tensors, ref
    return engines.PreparedSearch(search, listing, prebuilt), ready


def _gpu_setup(problem, direction, device, seed, check):
    import torch

    from .tensors import direction_data

    torch.cuda.set_device(device)
    # the reference on the CPU where this process (its own CUDA context taken) has no room
    # for it: Note [reference on the CPU] in measure/tensors.py
    tensors, native, ref, _ = direction_data(problem, direction, device, seed, check)
    return native, tensors, ref


def _job(spec: dict, events_path: str, setup, search, go=None, hangs=None) -> bool:
    """Run one job; False when this worker must retire after it. A job that fails with
    one of the project's errors outside any config (its tensors do not fit
    in the GPU's memory) says so, {"failed": message, "resource": bool}, and the worker
    serves on."""
    with open(events_path, "a", buffering=1) as events:
        def emit(ev: dict) -> None:
            events.write(json.dumps(ev) + "\n")
            events.flush()

        failed = space = None
        try:
            done = run(spec, emit, setup, search, go, hangs)
            space = None if done is None else done.to_dict()
        except ExplorerError as e:
            failed = {"failed": str(e), "resource": isinstance(e, ResourceError)}
        # Before the parent hears the end: it goes on timing on this GPU at once (and,
        # out of the except block, the error's frames no longer hold the job's tensors).
        healthy = _release()
        if failed:
            emit({**failed, "retire": not healthy})
        elif space is not None:
            emit({"space": space, "retire": not healthy})
        # else cancelled while held: the parent reads no more of this job
    return healthy


def _read_go() -> Optional[dict]:
    """A held job's go (Note [engine search ahead]): the next line of stdin, {"go": rest of
    the spec}; None for {"cancel": true} or the end of stdin."""
    line = sys.stdin.readline()
    try:
        msg = json.loads(line) if line.strip() else {}
    except ValueError:
        msg = {}
    go = msg.get("go") if isinstance(msg, dict) else None
    return go if isinstance(go, dict) else None


def _release() -> bool:
    """After a job: drop its tensors and plans, return the cached GPU memory. False when
    the CUDA context is lost (a config left a sticky error): the worker must not serve
    another job. Note [frozen imports]: the collection walks only what the jobs made."""
    import gc

    gc.collect()
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return True
    try:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - any error here means the context is unusable
        return False
    return True


# Note [frozen imports]: a full garbage collection walks every object the process holds,
# and torch's import alone leaves hundreds of thousands: in the H200's ResNet-50 sweep the
# collection after each job (_release) took 0.1 s, 6.9 s over the sweep's 68 directions,
# while the parent waited for the job's end. The objects made by the imports live as
# long as the process, so they are frozen (gc.freeze) once imported: the collector skips
# them, and a collection walks what the jobs made since.
def _preload() -> None:
    """Import what a job needs before the first one comes (a worker is started ahead of
    its job: Note [one engine worker] in measure/pipeline.py); nothing here touches the
    GPU. A failure is left for the job to report. Then Note [frozen imports]."""
    import gc

    try:
        import torch  # noqa: F401

        from . import engines, native, tensors  # noqa: F401
        native.load()
    except Exception:  # noqa: BLE001 - the job reports a missing torch or extension
        pass
    gc.collect()
    gc.freeze()


def main(argv=None, setup=None, search=None, hangs=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv != ["--serve"]:
        print("usage: python -m cudnn_explorer.measure.engine_serve --serve (jobs on stdin)",
              file=sys.stderr)
        return 2
    if setup is None and search is None:  # a real worker (tests pass fakes)
        _preload()
    for line in sys.stdin:  # one JSON job per line, until the parent closes it
        if line.strip():
            job = json.loads(line)
            if not isinstance(job, dict) or "spec" not in job:
                continue  # a go or cancel for a held job that ended before it (an error)
            with open(job["spec"]) as f:
                if not _job(json.load(f), job["events"], setup, search, _read_go, hangs):
                    return 0  # the parent was told ("retire") and starts another
    return 0


if __name__ == "__main__":
    quick_exit(main())  # Note [quick exit] in measure/procs.py: every result is written
