"""The model jobs: capture every convolution of one iteration of a model, and sweep a
model: PyTorch's own run of it (one fresh process per mode), then every unique problem
explored, the sweep handed to ``save`` after every problem and each finished direction
kept in the results store, so Ctrl-C or a kill loses only the problem in flight.

SweepRun owns a sweep's lifecycle (the processes started ahead, the environment, the
store) for every job that runs a model: sweep_model, the model command, advise, and the
ranks of a torchrun sweep."""
from __future__ import annotations

import dataclasses

import contextlib
import re
from dataclasses import dataclass, fields
from typing import Callable, Optional, Sequence, Tuple, Union

from ..core.capture import Capture, ModelSpec
from ..core.errors import GpuMemoryError, UserError
from ..core.options import ExploreOptions, flag, given_options, kept_fields, profile_name
from ..core.model_sweep import ModelSweep
from .events import Notify, check_callbacks, notifier
from . import lazy_measure
from .stores import StoreChoice, opened, saver, without_store

__all__ = ["capture", "sweep_model", "SweepSettings", "SweepRun",
           "SETTINGS_KEYWORDS", "mode_starts", "set_up_ahead", "capture_beside",
           "worker_ahead", "SweepProgress"]

# progress(done, total, message): problems done of total; a message of the step in hand
SweepProgress = Callable[[int, int, str], None]


def capture(model: Union[str, ModelSpec], device: Optional[str] = None,
            notify: Optional[Notify] = None, progress: Optional[Callable[[str], None]] = None,
            **kw) -> Capture:
    """Every convolution one iteration of ``model`` runs (ModelSpec.of says what ``model``
    and the keywords may be), as cuDNN gets it after autocast: its unique problems, each
    with its layers and its calls per iteration. ``device``: "cuda:N" (the default,
    cuda:0), or "cpu" where there is no GPU (a note says that autocast and layouts may
    differ from the GPU's). ``progress`` hears the step once the name and the GPU are
    checked."""
    check_callbacks(progress=progress, notify=notify)
    spec = ModelSpec.of(model, **kw)
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


# sweep_model's keywords that are SweepSettings' (the others are ModelSpec.of's)
SETTINGS_KEYWORDS = ("profile", "keep", "iterations", "store", "refresh", "plans", "uncovered",
                     "allow_environment")


@dataclass(frozen=True)
class SweepSettings:
    """How a model sweep runs, beside its ExploreOptions; create() builds it checked.

    ``profile``: "quick" or "thorough" (core.options.MODEL_PROFILES) sets the options,
    except the fields named in ``keep``; None leaves them as given (advise).
    ``iterations``: steady iterations of PyTorch's run of the model, per mode. ``store``:
    the results store (a StoreChoice): what it holds is not measured again (unless its
    ``refresh``), and what finishes is kept there. ``plans``: a plan file's path:
    PyTorch's run of the model gets a pinned mode too (jobs.plans.pinned_mode says what
    ``uncovered`` and ``allow_environment`` do). ``graph``: PyTorch's run times its steady
    iterations as replays of a CUDA graph of the whole step (advise). ``explore``: the
    problems are explored after PyTorch's run, so the engine worker is started ahead;
    False for a job that only runs the model (advise)."""

    profile: Optional[str] = "quick"
    keep: Tuple[str, ...] = ()
    iterations: int = 20
    store: StoreChoice = StoreChoice(use=False)
    plans: Optional[str] = None
    uncovered: str = "off"
    allow_environment: bool = False
    graph: bool = False
    explore: bool = True

    @classmethod
    def create(cls, **given) -> "SweepSettings":
        """Settings from sweep_model's keywords (SETTINGS_KEYWORDS: ``store`` and
        ``refresh`` as StoreChoice.of takes them), ``graph`` and ``explore``; UserError
        naming the first bad one, before any model runs."""
        from .plans import check_pinned_args

        unknown = sorted(set(given) - set(SETTINGS_KEYWORDS) - {"graph", "explore"})
        if unknown:
            raise UserError(f"{unknown[0]}: not a sweep setting; valid: "
                            f"{', '.join(SETTINGS_KEYWORDS)}, graph, explore")
        refresh = flag(given.pop("refresh", False), "refresh")
        d = dict({f.name: f.default for f in fields(cls)}, **given)
        for name in ("allow_environment", "graph", "explore"):
            d[name] = flag(d[name], name)
        check_pinned_args(d["plans"], d["uncovered"])  # a bad file or setting
        n = d["iterations"]
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 10000:
            raise UserError(f"iterations {n!r}: valid: an integer from 1 to 10000")
        d["store"] = StoreChoice.of(d["store"], refresh)
        if d["profile"] is not None:
            d["profile"] = profile_name(d["profile"])
        d["keep"] = kept_fields(d["keep"])
        return cls(**d)


def sweep_model(model: Union[str, ModelSpec, Capture], options: Optional[ExploreOptions] = None,
                settings: Optional[SweepSettings] = None, *,
                save: Optional[Callable[[ModelSweep], None]] = None,
                progress: Optional[SweepProgress] = None, notify: Optional[Notify] = None,
                bench=None, **kw) -> ModelSweep:
    """Sweep ``model``: a torchvision name or "pkg.module:factory" with ModelSpec.of's
    keywords, a ModelSpec, or a Capture made before. Returns the ModelSweep: per unique
    problem its Exploration (PyTorch's pick in each mode, the best legacy algorithm, the
    engine configs; ms per call, to be weighed by the capture's calls per iteration), and
    PyTorch's own run of the model in each mode (``iterations`` steady iterations each).

    ``options`` (default ExploreOptions.create()) as the settings' profile sets them.
    ``settings``: a SweepSettings, or its fields as keywords (SETTINGS_KEYWORDS: profile,
    keep, iterations, store (None, the default: no store; True: the default file; or a
    path), refresh, plans, uncovered, allow_environment; SweepSettings says what each
    does). ``save`` hears the sweep after every problem (write it to a file there);
    ``progress(done, total, message)`` hears every step. An interrupted sweep raises
    KeyboardInterrupt after ``save`` heard what finished. ``bench``: the measuring bench
    (measure.pipeline.GpuBench's methods; tests give a fake one): PyTorch's picks then
    come from its children per problem, not from a run of the whole model."""
    check_callbacks(save=save, progress=progress, notify=notify)
    given = {k: kw.pop(k) for k in SETTINGS_KEYWORDS if k in kw}
    if settings is not None and given:
        raise UserError(f"pass either settings or their keywords ({', '.join(given)}), "
                        f"not both")
    settings = settings or SweepSettings.create(**given)
    model = model if isinstance(model, Capture) else ModelSpec.of(model, **kw)
    with SweepRun(model, options, settings, notify=notify, progress=progress,
                  bench=bench) as run:
        run.capture()
        return run.sweep(save)


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




class SweepRun:
    """One model sweep's lifecycle, owned in one place. As a context (``with SweepRun(...)
    as run``) it applies the settings' profile to the options once, starts PyTorch's mode
    processes and the engine worker ahead (Note [model children started ahead], Note
    [engine worker started ahead]), and on every way out of the block (an error, Ctrl-C)
    ends them and closes the results store. Inside: capture(), then run_modes()
    (PyTorch's own run of the model) and sweep() (every unique problem explored); the
    environment is read, and the store opened, at most once.

    ``model``: a ModelSpec, or a Capture made before (capture() then returns it).
    ``notify`` hears notes and warnings; ``progress(done, total, message)`` every step;
    ``say(message)`` PyTorch's run of the model step by step (default: progress(0, total,
    message), and a mode answered from the store told to ``notify`` as "info").
    ``bench``: the measuring bench (measure.pipeline.GpuBench's methods; tests give a
    fake one): nothing is started ahead, and PyTorch's picks come from its children per
    problem, not from a run of the whole model. ``start`` False: nothing is started
    ahead (a capture only, a rank of a torchrun sweep)."""

    def __init__(self, model: Union[ModelSpec, Capture], options: Optional[ExploreOptions],
                 settings: SweepSettings, *, notify: Optional[Notify] = None,
                 progress: Optional[SweepProgress] = None,
                 say: Optional[Callable[[str], None]] = None, bench=None, start: bool = True):
        options = given_options(options)
        self.settings = settings
        self.options = options if settings.profile is None else options.profiled(
            settings.profile, settings.keep, model=True)
        self.cap = model if isinstance(model, Capture) else None
        self.spec = model.model if isinstance(model, Capture) else model
        self.notify, self.bench = notifier(notify), bench
        self.progress = progress or (lambda done, total, msg: None)
        self.say = say or self._said
        self.start = start and bench is None
        self.starts = self.worker = None  # started ahead: mode_starts's, worker_ahead's
        self._stack = contextlib.ExitStack()  # the store
        self._env = self._pinned = None
        self._db, self._db_open = None, False
        self._picks = None  # per problem, PyTorch's picks from its run of the model

    def __enter__(self) -> "SweepRun":
        if self.start:
            lazy_measure.require_driver()  # no GPU: said in milliseconds, before any start
        try:
            # Note [model children started ahead]: they import while this process captures
            if self.start and self.options.pytorch:
                self.starts = mode_starts(self.spec, self.options, bool(self.settings.plans),
                                          **self._graph_modes())
            if self.start and self.settings.explore:
                self.worker = worker_ahead(self.options)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """End the processes started ahead that are still there, and the engine worker
        where no bench took it (an error before the problems), and close the store."""
        try:
            try:
                if self.starts is not None:
                    self.starts.close()
            finally:
                if self.worker is not None:
                    self.worker.close()
        finally:
            self._stack.close()

    def _graph_modes(self) -> dict:
        if not self.settings.graph:
            return {}
        from ..model.run_modes import modes_of

        return dict(graph=True, modes=modes_of(self.options))

    def _said(self, msg: str) -> None:
        self.progress(0, len(self.capture().problems), msg)
        if "from the results store" in msg:
            self.notify("info", msg)

    def capture(self, device: Optional[str] = None,
                progress: Optional[Callable[[str], None]] = None) -> Capture:
        """The model's capture: the one given, else captured now (once) on ``device``
        (default cuda:N of the options), beside the first mode's process set up ahead of
        its turn (capture_beside); ``progress`` hears its step."""
        if self.cap is None:
            device = device or f"cuda:{self.options.device}"
            if self.settings.graph:  # advise: its first mode is not set up ahead
                self.cap = capture(self.spec, device, self.notify)
            else:
                self.cap = capture_beside(self.starts, self.spec, self.options, device,
                                          self.notify, progress=progress)
        return self.cap

    def environment(self):
        """The GPU's environment (core.exploration.Environment), read once: the bench's,
        where one was given."""
        if self._env is None:
            self._env = self.bench.environment() if self.bench is not None else \
                lazy_measure.measuring().environment(self.options.device)
        return self._env

    def store(self):
        """The results store of the settings, opened once and closed with this run; None
        without one, or where it cannot be used (one warning)."""
        if not self._db_open:
            self._db = self._stack.enter_context(opened(self.settings.store, self.notify))
            self._db_open = True
        return self._db

    def pinned(self):
        """The pinned mode of the settings' plan file and the file (jobs.plans.pinned_mode,
        checked against this environment), or (None, None) without one."""
        s = self.settings
        if not s.plans:
            return None, None
        if self._pinned is None:
            from .plans import pinned_mode

            self._pinned = pinned_mode(s.plans, self.environment(), s.uncovered,
                                       s.allow_environment)
        return self._pinned

    @property
    def timing(self):
        """How each mode of PyTorch's run of the model runs (model.run_modes.ModeTiming):
        the settings' iterations, after 5 warm-up ones, and their CUDA graph."""
        from ..model.run_modes import ModeTiming

        return ModeTiming(self.settings.iterations, graph=self.settings.graph)

    def run_modes(self, modes=None, timing=None, share: Optional[Sequence[int]] = None,
                  read: Optional[bool] = None, keep: bool = True):
        """PyTorch's own run of the captured model (model.run_modes.run_model): ``modes``
        (default modes_of(options), then the pinned mode with a plan file), each in the
        processes started ahead where they were (those left over are ended after), run as
        ``timing`` says (default: self.timing). A mode kept in the results store is
        answered from it (``read``: by default unless the store's refresh; True: always,
        as a rank reads the others' modes), and each one finished is kept there (``keep``
        False: nothing read or kept, each GPU its own run). ``share``: only the modes at
        these positions. Returns the ModelRun; a run of the default modes gives sweep()
        PyTorch's picks."""
        from ..model.run_modes import StoreCache, modes_of, run_model

        cap, db = self.capture(), self.store()
        default = modes is None
        if default:
            pinned, _ = self.pinned()
            modes = modes_of(self.options) + ([pinned] if pinned else [])
        cache = None if db is None or not keep else StoreCache(
            db, self.environment(), cap.model.describe(),
            lambda e: without_store(self.notify, e),
            read=not self.settings.store.refresh if read is None else read)
        started, self.starts = self.starts, None
        try:
            run, picks = run_model(cap, self.options, timing or self.timing, modes=modes,
                                   progress=self.say, cache=cache, share=share,
                                   started=started)
        finally:
            if started is not None:
                started.close()  # those a stored mode did not need
        if default and share is None:
            self._picks = run, picks
        return run

    @property
    def model_run(self):
        """PyTorch's run of the model in its default modes (core.model_run.ModelRun), once
        run_modes or sweep ran it; None before, or without it."""
        return self._picks[0] if self._picks else None

    def sweep(self, save: Optional[Callable[[ModelSweep], None]] = None,
              only: Optional[Sequence[int]] = None) -> ModelSweep:
        """Every unique problem of the capture explored (``only``: these indices), after
        PyTorch's own run of the model where the options ask for it and no bench was given
        (run_modes, unless it ran already); ``save`` hears the sweep after every problem.
        What the store holds is not measured again (unless its refresh), and every
        direction that finishes is kept there."""
        pipeline = lazy_measure.measuring()
        from ..model.explore_problems import StoredProblems, sweep

        cap, db, bench = self.capture(), self.store(), self.bench
        if self.options.pytorch and cap.problems and bench is None and self._picks is None:
            self.run_modes()
        if bench is None:
            from ..model.run_modes import ModelBench

            # the problems' bench, with the worker started ahead (Note [engine worker
            # started ahead]); PyTorch's picks from its run of the model, where it ran
            device, env = self.options.device, self.environment()
            bench = pipeline.GpuBench(device, keep_worker=True, worker=self.worker, env=env) \
                if self._picks is None else ModelBench(device, self._picks[1], self.worker, env)
        refresh = self.settings.store.refresh

        def lookup(problem, one):
            if db is None or refresh:
                return None
            return db.lookup(problem, self.environment(), one, partial=True)

        run = self.model_run
        told = save or (lambda sw: None)

        def with_run(sw: ModelSweep) -> ModelSweep:  # the sweep with PyTorch's run in it
            return sw if run is None else dataclasses.replace(sw, pytorch_run=run)

        stored = StoredProblems(lookup, lambda problem, one: saver(db, problem, one,
                                                                    self.notify))
        return with_run(sweep(cap, self.options, save=lambda sw: told(with_run(sw)),
                              progress=self.progress, bench=bench, stored=stored,
                              profile=self.settings.profile or "thorough", only=only))
