"""The model jobs: capture every convolution of one iteration of a model, and sweep a
model: PyTorch's own run of it (one fresh process per mode), then every unique problem
explored, the sweep handed to ``save`` after every problem and each finished direction
kept in the results store, so Ctrl-C or a kill loses only the problem in flight."""
from __future__ import annotations

import re
from typing import Callable, Optional, Sequence, Union

from ..core.capture import Capture, ModelSpec
from ..core.errors import GpuMemoryError, UserError
from ..core.options import ExploreOptions, given_options, profile_name
from ..core.model_sweep import ModelSweep
from .events import Notify, notifier
from . import lazy_measure
from .stores import StoreChoice, opened, saver, without_store

__all__ = ["model_spec", "capture", "sweep_model", "mode_starts", "set_up_ahead",
           "capture_beside", "worker_ahead", "SweepProgress"]

# progress(done, total, message): problems done of total; a message of the step in hand
SweepProgress = Callable[[int, int, str], None]


def model_spec(model: Union[str, ModelSpec], **kw) -> ModelSpec:
    """``model`` as a ModelSpec: one already built (then no keywords), or a torchvision
    name or "pkg.module:factory" with ModelSpec.create's keywords (batch, input_shape,
    sizes, amp, channels_last, train)."""
    if isinstance(model, ModelSpec):
        if kw:
            raise UserError(f"pass either a ModelSpec or keywords, not both "
                            f"({', '.join(kw)})")
        return model
    return ModelSpec.create(model, **kw)


def capture(model: Union[str, ModelSpec], device: Optional[str] = None,
            notify: Optional[Notify] = None, progress: Optional[Callable[[str], None]] = None,
            **kw) -> Capture:
    """Every convolution one iteration of ``model`` runs (model_spec says what ``model``
    and the keywords may be), as cuDNN gets it after autocast: its unique problems, each
    with its layers and its calls per iteration. ``device``: "cuda:N" (the default,
    cuda:0), or "cpu" where there is no GPU (a note says that autocast and layouts may
    differ from the GPU's). ``progress`` hears the step once the name and the GPU are
    checked."""
    spec = model_spec(model, **kw)
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        device = f"cuda:{device}"
    if device is not None and not (isinstance(device, str) and
                                   re.fullmatch(r"cpu|cuda(:[0-9]{1,4})?", device)):
        raise UserError(f"device {device!r}: valid: \"cpu\", \"cuda\" or \"cuda:N\"")
    lazy_measure.measuring()
    import torch

    from ..measure import native
    from ..model import zoo
    from ..model.tracer import capture_model

    if device is None:
        device = "cuda:0" if torch.cuda.is_available() else "cpu"
    if device != "cpu":
        zoo.check(spec)  # a misspelt name before what the machine lacks
        native.require_gpu(int(device.partition(":")[2] or 0))  # says what is missing
    if progress is not None:
        progress(f"building the model and capturing one iteration on {device}: "
                 f"{spec.describe()}")
    cap = capture_model(spec, device)
    if device == "cpu":  # said of a capture that happened, never before an error
        notifier(notify)("note", "no GPU: captured on the CPU, where autocast and layouts "
                                 "may differ from the GPU's")
    return cap


def sweep_model(model: Union[str, ModelSpec, Capture], options: Optional[ExploreOptions] = None,
                *, profile: str = "quick", keep: Sequence[str] = (), iterations: int = 20,
                store=None, refresh: bool = False,
                save: Optional[Callable[[ModelSweep], None]] = None,
                progress: Optional[SweepProgress] = None, notify: Optional[Notify] = None,
                bench=None, plans: Optional[str] = None, uncovered: str = "off",
                allow_environment: bool = False, starts=None, worker=None,
                **kw) -> ModelSweep:
    """Sweep ``model``: a torchvision name or "pkg.module:factory" with model_spec's
    keywords, a ModelSpec, or a Capture made before. Returns the ModelSweep: per unique
    problem its Exploration (PyTorch's pick in each mode, the best legacy algorithm, the
    engine configs; ms per call, to be weighed by the capture's calls per iteration), and
    PyTorch's own run of the model in each mode (``iterations`` steady iterations each).

    ``options`` (default ExploreOptions.create()) as ``profile`` sets them
    (core.options.MODEL_PROFILES: "quick", only the listed engine configs, with 10 ms
    budgets; "thorough": the options as given, every config in full), except the fields
    named in ``keep``. ``store``: None (no store, the default), True (the default
    file) or a path: what it holds is not measured again (unless ``refresh``), and what
    finishes is kept there. ``save`` hears the sweep after every problem (write it to a
    file there); ``progress(done, total, message)`` hears every step. An interrupted sweep
    raises KeyboardInterrupt after ``save`` heard what finished. ``bench``: the measuring
    bench (measure.pipeline.GpuBench's methods; tests give a fake one): PyTorch's picks
    then come from its children per problem, not from a run of the whole model.
    ``plans``: a plan file's path: PyTorch's run of the model gets a pinned mode too (the
    model pinned to the file, in a fresh process; jobs.plans.pinned_mode says what
    ``uncovered`` and ``allow_environment`` do); it gives no problem a pick. ``starts``:
    PyTorch's mode processes, started before a Capture given as ``model`` was made
    (mode_starts, with the same options and plans; closed here); otherwise they are
    started before this job's own capture. ``worker``: the engine worker, started ahead
    the same way (worker_ahead; closed here); otherwise started before this job's own
    capture (Note [engine worker started ahead])."""
    notify = notifier(notify)
    from .plans import check_pinned_args

    check_pinned_args(plans, uncovered)  # a bad file or setting: before the model runs
    if isinstance(iterations, bool) or not isinstance(iterations, int) or \
            not 1 <= iterations <= 10000:
        raise UserError(f"iterations {iterations!r}: valid: an integer from 1 to 10000")
    StoreChoice.of(store, refresh)  # a bad store argument: refused before the model runs
    options = given_options(options).profiled(profile, keep, model=True)
    spec = model.model if isinstance(model, Capture) else model_spec(model, **kw)
    if bench is None:
        lazy_measure.require_driver()  # no GPU: said in milliseconds, before any process starts
    # Note [model children started ahead]: PyTorch's mode processes import meanwhile
    if starts is None and options.pytorch and bench is None:
        starts = mode_starts(spec, options, bool(plans))
    if worker is None and bench is None:
        worker = worker_ahead(options)
    try:
        cap = model if isinstance(model, Capture) else capture_beside(
            starts, spec, options, f"cuda:{options.device}", notify)
        return _swept(cap, options, profile, iterations, store, refresh, save, progress,
                      notify, bench, plans, uncovered, allow_environment, starts, worker)
    finally:
        if starts is not None:
            starts.close()
        if worker is not None:
            worker.close()  # where no bench took it (an error before the problems)


def mode_starts(spec: ModelSpec, options: ExploreOptions, plans: bool, graph: bool = False,
                modes=None):
    """The processes of PyTorch's run of the model ``spec`` in ``modes`` (default
    modes_of(options)), then in the pinned mode with ``plans``, started
    now (model.mode_runner.ModeStarts), each with ``graph``'s steady process: before the
    capture, so that they import while it runs."""
    from ..model.mode_runner import ModeStarts
    from ..model.run_modes import modes_of

    pinned = [m.mode == "pinned" for m in modes or modes_of(options)]
    return ModeStarts(spec, pinned + ([True] if plans else []), graph=graph)


# Note [first mode set up ahead]: the first mode's process of PyTorch's run of the model
# spent 1.5-1.9 s of its turn setting up (the model built and moved to the GPU, cuDNN
# loaded by a warm-up convolution: model/mode_child.py's "setup"), in an H100 ResNet-50
# sweep whose capture took 6.1 s after torch's import (4.5 s of it importing torchvision),
# with no measurement running. So the job hands that process its mode's setup
# (mode_runner.setup_spec) before it captures: it sets up once its imports are done,
# beside the capture (neither is timed), and waits for its turn, where only what the
# setup did not hide is waited for. Its spec at its turn must agree on what the setup
# used, the capture's TF32 setting included (expected on, PyTorch's default); where it
# does not, or the setup failed, a process started then runs the mode as before. Only the
# first mode: a process set up holds a CUDA context and the model's weights while it
# waits, and two more would take the tool's peak past the model's own reserved memory +
# 2 GiB (3.59 GiB against 3.81). And only with AHEAD_MIN_FREE_BYTES free on the GPU
# before the capture: on a GPU shared with a training job the capture gets the memory; a
# capture that runs out of memory beside the setup runs again without it (Note [capture
# before the setup]).
# Side by side (scripts/bench_model.py --ahead-ab 2, an H200, two pairs of ResNet-50
# sweeps): PyTorch's run 2.1 s shorter with the setup ahead in both pairs, the time before it
# at most 0.5 s longer, the sweep a median 3.1 s shorter (docs/benchmarks.md).
AHEAD_MIN_FREE_BYTES = 8 * 2**30


def set_up_ahead(starts, spec: ModelSpec, options: ExploreOptions) -> bool:
    """Set the first mode's process of ``starts`` (mode_starts's, or None) up now, before
    the capture (Note [first mode set up ahead]); whether it was. Imports torch."""
    if starts is None or not options.pytorch:
        return False
    lazy_measure.measuring()
    import torch

    from ..model.mode_runner import setup_spec
    from ..model.run_modes import modes_of

    modes = modes_of(options)
    if not modes or not torch.cuda.is_available():
        return False
    try:
        free, _ = torch.cuda.mem_get_info(options.device)
    except (RuntimeError, AssertionError):  # no such device: the capture says so
        return False
    if free < AHEAD_MIN_FREE_BYTES:
        return False
    return starts.prepare(0, setup_spec(spec, modes[0], options.device, options.seed,
                                        tf32=True))


# Note [capture before the setup]: the first mode's process, set up ahead, holds a CUDA
# context, the model's weights and a warm-up convolution's memory while this process
# captures (Note [first mode set up ahead]). A capture that fits the GPU alone may not fit
# beside it: a batch sized to the GPU, or a model of many GiB. Before that note such a
# capture ran; so where it runs out of GPU memory with the process set up, the process is
# ended (its memory given back), a fresh one started in its place (it imports, and sets up
# in its turn, as before), and the capture runs once more. Only then is running out of
# memory the capture's own error.
def capture_beside(starts, spec: ModelSpec, options: ExploreOptions, device: str,
                   notify: Optional[Notify] = None,
                   progress: Optional[Callable[[str], None]] = None) -> Capture:
    """The first mode's process of ``starts`` (mode_starts's, or None) set up ahead of its
    turn where it can be (set_up_ahead), then capture(spec, device, notify, progress)
    beside it: where the capture runs out of GPU memory while it is set up, the process
    is let go and the capture runs again (Note [capture before the setup])."""
    from ..measure import native

    set_up_ahead(starts, spec, options)  # Note [first mode set up ahead]
    try:
        return capture(spec, device, notify, progress=progress)
    except Exception as e:  # noqa: BLE001  (only running out of memory is retried)
        if not (isinstance(e, GpuMemoryError) or native.is_out_of_memory(e)) \
                or starts is None or not starts.let_go(0):
            raise
    notifier(notify)("note", "the capture ran out of GPU memory beside PyTorch's first "
                             "mode's process, set up ahead of its turn: that process ended "
                             "(it sets up in its turn), the capture run again")
    native.release_cached_memory()
    return capture(spec, device, notify, progress=progress)


# Note [engine worker started ahead]: the engine worker spends seconds importing torch
# before its first job (Note [one engine worker] in measure/pipeline.py). A model sweep
# started it with its first problem, after PyTorch's run of the model, and waited for it:
# on an H100 the sweep's first direction took 4.9 s in its engine configs, whose rounds
# took 0.35 s, against 0.2-0.4 s for every later direction. So the worker is started with
# PyTorch's mode processes, before the capture: it imports while this process imports and
# captures, and touches no GPU until the problems (its first job), so PyTorch's run of the
# model, which comes between, runs as before.
def worker_ahead(options: ExploreOptions):
    """The engine worker of a model sweep with ``options``, started now (it imports; Note
    [engine worker started ahead]), or None where the options time no engine configs."""
    if not options.engines:
        return None
    from ..measure.engine_worker import EngineWorker

    worker = EngineWorker()
    worker.start()
    return worker


def _swept(cap: Capture, options: ExploreOptions, profile: str, iterations: int, store,
           refresh: bool, save, progress, notify: Notify, bench, plans, uncovered: str,
           allow_environment: bool, starts, worker) -> ModelSweep:
    """sweep_model's sweep of the captured model ``cap`` (``starts``: PyTorch's mode
    processes, and ``worker``: the engine worker, started before the capture)."""
    pipeline = lazy_measure.measuring()
    from ..model.explore_problems import sweep

    tell = progress or (lambda done, total, msg: None)
    total = len(cap.problems)
    choice = StoreChoice.of(store, refresh)
    with opened(choice, notify) as db:
        env = None if db is None else (
            bench.environment() if bench is not None else pipeline.environment(options.device))
        run = None
        if options.pytorch and cap.problems and bench is None:  # one child per mode
            def say(msg):
                tell(0, total, msg)
                if "from the results store" in msg:
                    notify("info", msg)

            extra = []
            if plans:
                from .plans import pinned_mode

                here = env or pipeline.environment(options.device)
                extra.append(pinned_mode(plans, here, uncovered, allow_environment)[0])
            run, bench = pytorch_run(cap, options, iterations, say,
                                     store_cache(db, env, cap, notify, not choice.refresh),
                                     extra, starts, worker)
            if starts is not None:
                starts.close()  # those a stored mode did not need
        elif bench is None:  # the problems' bench, with the worker started ahead
            bench = pipeline.GpuBench(options.device, keep_worker=True, worker=worker)

        def cached(problem, one):
            if db is None or choice.refresh:
                return None
            return db.lookup(problem, env, one, partial=True)

        return sweep(cap, options, save=save or (lambda sw: None), progress=tell,
                     cached=cached, saver=lambda problem, one: saver(db, problem, one, notify),
                     bench=bench, profile=profile_name(profile), pytorch_run=run)


def store_cache(db, env, cap: Capture, notify: Notify, read: bool = True):
    """PyTorch's runs of the model kept in the results store ``db`` (with ``read`` False
    it only keeps the new ones), or None without a store."""
    if db is None:
        return None
    from ..model.run_modes import StoreCache

    return StoreCache(db, env, cap.model.describe(), lambda e: without_store(notify, e),
                      read=read)


def pytorch_run(cap: Capture, options: ExploreOptions, iterations: int, say, cache,
                extra=(), starts=None, worker=None):
    """PyTorch's own run of the model (its modes, then ``extra`` ones such as the pinned
    mode; ``starts``: their processes started before, mode_starts), and the pipeline's
    bench that takes its picks (with ``worker``, the engine worker started ahead)."""
    from ..model.run_modes import ModelBench, modes_of, run_model

    run, per_problem = run_model(cap, options, iterations=iterations, progress=say,
                                 cache=cache, started=starts,
                                 modes=modes_of(options) + list(extra))
    return run, ModelBench(options.device, per_problem, worker)
