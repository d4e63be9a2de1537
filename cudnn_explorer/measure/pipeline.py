"""The exploration pipeline: options in, one Exploration out, built once.

Order: PyTorch's children first (on a GPU that holds nothing of ours yet), then per
direction the legacy rows, PyTorch's picks (matched to those rows by kernels) and the
engine configs (seeded with PyTorch's picks), and one DirectionResult. Every GPU step goes
through a *bench* (:class:`GpuBench`); CPU tests pass a fake one (tests/fakes.py) and run
the whole pipeline without a GPU.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

from ..core import analysis
from ..core.errors import (ChildError, GpuError, Interrupted, MissingDependencyError,
                           ResourceError, UserError)
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.version import __version__
from ..core.exploration import ChildWall, Environment, Exploration, Measurement
from ..core.records import DirectionResult, EngineSpace, PyTorchPick
from ..core.schema import utc_now
from ..core.search_preferences import SearchPreferences
from . import native
from .environment import environment
from .pytorch_picks import ModeRun, pick_of, run_children, start_children
from .engine_worker import EngineWorker, HeldJob, explore_isolated, hold_isolated
from .legacy import LegacyLab, measure_legacy
from .tensors import (OUTPUT_OF, REFERENCE, make_tensors, native_problem, problem_view,
                      reference, tensor_bytes)

__all__ = ["explore", "GpuBench", "environment", "info", "run_algorithm", "reference",
           "measurement_of"]


# Note [one engine worker]: the directions of one problem share one engine worker, as a
# model sweep's problems do. Starting a worker costs seconds (Python and torch, and its
# CUDA context: about 5 s and 0.5 s on an H200), paid once per run instead of once per
# direction. Its process is started ahead, before this process imports torch: until its
# first job it only imports (no CUDA), so it measures nothing and disturbs no
# measurement. Between jobs it holds its CUDA context but no tensors (it
# returns its cached memory); while the GPU has less than KEEP_WORKER_FREE_BYTES free
# after a direction, the worker ends with that direction instead, so that the next
# direction's legacy rows and Find get the memory of its context too.
KEEP_WORKER_FREE_BYTES = 8 << 30


class GpuBench:
    """The GPU side of the pipeline: environment, one LegacyLab per direction, PyTorch's
    children and the engine-config workers."""

    def __init__(self, device: int = 0, keep_worker: Optional[bool] = None,
                 worker: Optional[EngineWorker] = None, env: Optional[Environment] = None):
        """``keep_worker``: True: one engine worker serves every direction until close();
        False: each direction's worker ends with it; None (the default): kept while the
        GPU has KEEP_WORKER_FREE_BYTES free (Note [one engine worker]). ``worker``: the
        EngineWorker to use, perhaps started ahead (default: a new one); close() ends it.
        ``env``: the device's environment, read before (default: read when asked)."""
        self.device, self.env = device, env
        self.worker = worker if worker is not None else EngineWorker()
        self.keep_worker = keep_worker
        self._children: list = []

    def prestart(self, problem: ConvProblem, options: ExploreOptions) -> None:
        """Start, before this process imports torch, the processes ``options`` will need:
        the engine worker, ahead of its first job, and PyTorch's children, one per mode
        (they import, and touch no GPU until they are given work; Note [children started
        ahead])."""
        if options.engines:
            self.worker.start()
        if options.pytorch and not self._children:
            self._children = start_children(problem, options)

    def _keep(self) -> bool:
        if self.keep_worker is not None:
            return self.keep_worker
        try:
            import torch

            free, _ = torch.cuda.mem_get_info(self.device)
        except Exception:  # noqa: BLE001 - no answer: keep no worker that might crowd it
            return False
        return free >= KEEP_WORKER_FREE_BYTES

    def environment(self) -> Environment:
        return self.env if self.env is not None else environment(self.device)

    def free_bytes(self) -> Optional[int]:
        """The GPU's free memory now (None when it cannot be asked)."""
        return native.free_bytes(self.device)

    def frontend_available(self) -> bool:
        return native.frontend_available()

    def children(self, problem: ConvProblem, options: ExploreOptions, say) -> List[ModeRun]:
        ahead, self._children = self._children, []
        return run_children(problem, options, say, ahead=ahead)

    def lab(self, problem: ConvProblem, direction: str, options: ExploreOptions) -> LegacyLab:
        return LegacyLab(problem, direction, options)

    def hold_engines(self, problem: ConvProblem, direction: str, options: ExploreOptions,
                     preferred_tags, finalist_tags=None) -> Optional[HeldJob]:
        """This direction's engine job handed to the worker ahead of its legacy rows
        (Note [engine search ahead] in measure/engine_serve.py), for engines(); None
        where the GPU has no room for two directions' tensors beside
        KEEP_WORKER_FREE_BYTES, or the worker is not kept."""
        if not options.engines or self.keep_worker is False:
            return None
        free = self.free_bytes()
        need = KEEP_WORKER_FREE_BYTES + 2 * tensor_bytes(problem, options.check)
        if free is None or free < need:
            return None
        try:
            return hold_isolated(problem, direction, options,
                                 SearchPreferences(preferred_tags=preferred_tags,
                                                   finalist_tags=finalist_tags),
                                 worker=self.worker)
        except ChildError:  # a worker that cannot start: engines() says so, in its turn
            return None

    def engines(self, problem: ConvProblem, direction: str, options: ExploreOptions,
                legacy_rows, preferred_tags, say, finalist_tags=None,
                held: Optional[HeldJob] = None) -> EngineSpace:
        try:
            return explore_isolated(problem, direction, options,
                                    SearchPreferences(legacy_rows=legacy_rows,
                                                      preferred_tags=preferred_tags,
                                                      finalist_tags=finalist_tags),
                                    progress=say, worker=self.worker, held=held)
        finally:
            if not self._keep():
                self.worker.close()

    def close(self) -> None:
        """End the engine worker (a later engines() call starts another), and the
        children started for children() that never ran."""
        self.worker.close()
        for child in self._children:
            child.close()
        self._children = []

    def scope(self):
        """Run on this bench's GPU (torch.cuda.device)."""
        import torch

        return torch.cuda.device(self.device)


def measurement_of(options: ExploreOptions, env: Environment,
                   problem: ConvProblem) -> Measurement:
    """How an exploration of ``problem`` with ``options`` measures on ``env``: the
    options themselves, the timing method every row asks for, the reference and the peak
    table's source."""
    peak = analysis.peak_for(env.gpu_name, problem.dtype, problem.math_type)
    return Measurement(
        retimed=options.retime, budget_ms=options.budget_ms if options.retime else None,
        flush_l2=options.flush_l2, graph=options.graph,
        method=options.timing.method if options.retime else "",
        eager_budget_ms=options.timing.eager_budget_ms or None,
        options=options.to_dict(), reference=REFERENCE if options.check else "",
        peak_source=analysis.PEAK_SOURCE if peak else f"no peak table entry for {env.gpu_name}",
        bandwidth_gbs=peak.gbs if peak else None)


def explore(problem: ConvProblem, options: Optional[ExploreOptions] = None,
            progress: Optional[Callable[[str], None]] = None, bench=None,
            on_direction: Optional[Callable[[Environment, Measurement, DirectionResult],
                                            None]] = None,
            **kw) -> Exploration:
    """Explore every direction of ``problem`` that ``options`` name.

    ``options``: an ExploreOptions, or the same as keywords (``budget_ms=10,
    engines=False``; ExploreOptions.create validates them). Returns an Exploration whose
    DirectionResults hold cudnnFind*Ex's rows (Find's own time in ms, workspace in
    bytes), each successful one re-timed in steady state (median per launch in ms, beside
    the eager wall time per call) and checked against a float64 reference; the
    cudnnGet*_v7 order; every cudnnGet*WorkspaceSize answer; PyTorch's own choice in
    every mode (each measured in a fresh child process, by the same timing method); and
    the cuDNN 9 engine configs (in worker processes under a watchdog). Runs on PyTorch's
    cuDNN handle and current stream on GPU ``options.device``. ``progress`` hears one
    line per step; ``on_direction`` gets each direction as soon as it is finished (the CLI
    saves it in the results store there). A direction that did not finish keeps what
    did, with its ``error`` saying what is missing and why, and the Exploration is
    ``complete`` False. Ctrl-C raises core.errors.Interrupted, whose ``partial`` is the
    Exploration of the directions that finished (``complete`` False; None when none
    had)."""
    if options is None:
        options = ExploreOptions.create(**kw)
    elif kw:
        raise UserError(f"pass either options or keywords, not both ({', '.join(kw)})")
    own_bench = bench is None
    bench = bench or GpuBench(options.device)
    try:
        return _explore(problem, options, progress, bench, on_direction)
    finally:
        if own_bench:
            bench.close()


def _explore(problem: ConvProblem, options: ExploreOptions, progress, bench,
             on_direction) -> Exploration:
    say = progress or (lambda msg: None)
    t0 = time.perf_counter()
    bench.prestart(problem, options)  # importing ahead of us; Note [one engine worker]
    env = bench.environment()
    if options.engines and not bench.frontend_available():
        raise MissingDependencyError(
            "this build of cudnn_explorer._C has no cudnn-frontend, so it cannot list engine "
            f"configs; pip install nvidia-cudnn-frontend, then rebuild: {native.BUILD_HINT} "
            "(or run without engines: --no-engines, engines=False)")
    measurement = measurement_of(options, env, problem)
    results = []
    setup_s = time.perf_counter() - t0
    pytorch_s = None
    runs = []

    def exploration(complete: bool = True) -> Exploration:
        # a direction that did not finish (its ``error``) leaves the exploration
        # incomplete, as an interruption does
        return Exploration(problem=problem, environment=env, directions=results,
                           tool_version=__version__, created=utc_now(),
                           measurement=measurement,
                           complete=complete and not any(d.error for d in results),
                           pytorch_wall_s=pytorch_s, wall_s=time.perf_counter() - t0,
                           setup_s=setup_s, pytorch_children=_child_walls(runs))

    try:
        t1 = time.perf_counter()
        runs = bench.children(problem, options, say) if options.pytorch else []
        pytorch_s = time.perf_counter() - t1 if options.pytorch else None
        with bench.scope():
            for d in options.directions:
                results.append(_direction(problem, d, options, bench, runs, env, say))
                if on_direction is not None:
                    on_direction(env, measurement, results[-1])
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM from the command line: keep what finished
        raise Interrupted(exploration(complete=False) if results else None) from None
    return exploration()


def _with_free_memory(e: Exception, free: Optional[int], device: int) -> Exception:
    """``e``, saying how much memory GPU ``device`` had free when it failed (``free``
    bytes), unless its message does already or the GPU could not say."""
    if free is None or "MiB free" in str(e):
        return e
    return type(e)(f"{e} ({free / 2**20:.0f} MiB free on GPU {device} when it failed)")


def _after_worker(e: Exception, bench, device: int) -> str:
    """An engine worker's error ``e``; where the worker ran out of GPU memory without
    saying what was free, with what GPU ``device`` had free once it had ended."""
    text = str(e)
    if not isinstance(e, ResourceError) or " free" in text:
        return text
    free = bench.free_bytes()
    return text if free is None else \
        f"{text} ({free / 2**20:.0f} MiB free on GPU {device} once the worker had ended)"


def _child_walls(runs: List[ModeRun]) -> List[ChildWall]:
    """Where each of PyTorch's processes spent its wall time, as far as it said."""
    return [ChildWall(label=r.spec.label, ready_wait_s=r.result.ready_wait_s,
                      run_s=r.result.run_s, phases_s=dict(r.result.phases_s))
            for r in runs if r.result is not None]


@dataclass(frozen=True)
class DirectionStart:
    """What _direction did before a direction's legacy rows, for _measured: when it began
    (``t0``, time.perf_counter() seconds), PyTorch's picks as the searches need them
    (``picks``: pick_of without the legacy rows), the engine search's ``preferences``
    (_engine_preferences: its preferred and finalist tags) and ``held``, its engine job
    handed to the worker ahead (None: none was)."""

    t0: float
    picks: Sequence[PyTorchPick]
    preferences: SearchPreferences
    held: Optional[HeldJob] = None


def _direction(problem: ConvProblem, d: str, options: ExploreOptions, bench, runs,
               env: Environment, say) -> DirectionResult:
    """One direction, built once. Out of GPU memory, it keeps what finished: the legacy
    rows without the engine configs, or no rows, with ``error`` saying what was needed
    and what was free; the other directions go on. So does an engine worker that fails
    outside any config (ChildError: it could not start, or died between configs)."""
    t0 = time.perf_counter()
    # PyTorch's picks as the searches need them: what the legacy rows do not change
    picks = [pick_of(run, d) for run in runs]
    wishes = _engine_preferences(picks)
    # Note [engine search ahead]: the engine job goes to the worker now, and waits there
    held = bench.hold_engines(problem, d, options, wishes.preferred_tags,
                              wishes.finalist_tags)
    try:
        return _measured(problem, d, options, bench, runs, env, say,
                         DirectionStart(t0, picks, wishes, held))
    finally:
        if held is not None:
            held.cancel()  # a no-op once it went; else (an error, Ctrl-C) it is dropped


def _engine_preferences(picks) -> SearchPreferences:
    """A direction's engine search as PyTorch's picks ask for it: each pick and the plans
    it timed compete (the preferred tags); a staged search times each pick in full (the
    finalist tags). It has no legacy rows yet."""
    preferred = [t for p in picks for t in (p.engine_tag, *(t for t, _ in p.timed)) if t]
    return SearchPreferences(preferred_tags=preferred,
                             finalist_tags=[p.engine_tag for p in picks if p.engine_tag])


def _measured(problem: ConvProblem, d: str, options: ExploreOptions, bench, runs,
              env: Environment, say, start: DirectionStart) -> DirectionResult:
    """_direction's work, after what ``start`` holds: PyTorch's picks before the legacy
    rows, the engine search's preferences and its held job."""
    try:
        lab = bench.lab(problem, d, options)
        try:
            # a staged search times PyTorch's legacy pick in full
            legacy_picks = [p.legacy_algo for p in start.picks if p.legacy_algo]
            leg = measure_legacy(problem, d, lab, options, env.gpu_name,
                                 want_kernels=options.pytorch or options.engines, say=say,
                                 finalists=legacy_picks)
        except GpuError as e:  # what was free then, before the direction's memory is let go
            raise _with_free_memory(e, bench.free_bytes(), options.device) from None
        finally:
            lab.close()  # the engine workers get the GPU's memory
    except (ResourceError, GpuError) as e:
        # A GPU fault in one direction (out of memory, or a call that failed on a GPU
        # short of it: Note [cached memory and cuDNN] in measure/tensors.py) loses that
        # direction only; the error says what the GPU had free when it failed.
        say(f"{d}: {e}")
        return DirectionResult(direction=d, math_type=problem.math_type, find=[],
                               heuristics=[], workspace=[], workspace_needed_bytes=0,
                               workspace_given_bytes=0,
                               workspace_cap_bytes=options.max_workspace_bytes,
                               flops=analysis.flops(problem, d),
                               min_bytes=analysis.min_bytes(problem, d), error=str(e))
    picks = [pick_of(run, d, leg.ok) for run in runs]
    space, error = None, ""
    legacy_s, engines_s = time.perf_counter() - start.t0, None
    if options.engines:
        t1 = time.perf_counter()
        wishes = start.preferences
        try:
            space = bench.engines(problem, d, options, leg.ok, wishes.preferred_tags, say,
                                  wishes.finalist_tags, held=start.held)
        except (ResourceError, ChildError, GpuError) as e:
            # the legacy rows stay: a worker that cannot start (a GPU short of memory for
            # its CUDA context) or dies outside any config loses only the engine configs,
            # and one that stopped the search (Note [a worker short of memory] in
            # measure/engine_worker.py) only those it had not tried
            space = e.partial
            ran = 0 if space is None else sum(c.ok for c in space.configs)
            error = (f"engine configs: {_after_worker(e, bench, options.device)}"
                     + (f"; the {ran} that ran are kept" if ran else ""))
            say(f"{d}: {error}")
        engines_s = time.perf_counter() - t1
    return DirectionResult(
        direction=d, math_type=leg.math_type, find=leg.find, heuristics=leg.heuristics,
        workspace=leg.workspace, workspace_needed_bytes=leg.workspace_needed_bytes,
        workspace_given_bytes=leg.workspace_given_bytes,
        workspace_cap_bytes=options.max_workspace_bytes, find_requested=leg.find_requested,
        find_returned=leg.find_returned, find_wall_ms=leg.find_wall_ms,
        flops=analysis.flops(problem, d), min_bytes=analysis.min_bytes(problem, d),
        pytorch=picks, engines=space, searched_math_types=leg.searched_math_types,
        find_wall_ms_all=leg.find_wall_ms_all, workspace_free_bytes=leg.workspace_free_bytes,
        find_errors=leg.find_errors, error=error, legacy_wall_s=legacy_s,
        engines_wall_s=engines_s, reference_on_cpu=leg.reference_on_cpu,
        legacy_rounds=list(leg.rounds), legacy_setup_s=leg.setup_s,
        legacy_checks_s=leg.checks_s)


def run_algorithm(problem: ConvProblem, direction: str, algo: int, math_type: str,
                  device: int = 0, seed: int = 0, tensors: Optional[Dict] = None):
    """Run one legacy algorithm once. Returns (tensors, output): ``tensors`` as from
    make_tensors (pass them in to reuse inputs) and the direction's output in the
    problem's own shape (1-D problems squeezed back)."""
    if tensors is None:
        tensors = make_tensors(problem, direction, device, seed)
    out = OUTPUT_OF[direction]
    tensors[out].fill_(float("nan"))
    p = native_problem(problem, tensors)
    native.run_algorithm(direction, p, algo, math_type)
    return tensors, problem_view(problem, tensors[out])


def info(device: int = 0) -> dict:
    """Build-time vs running versions, and the GPUs; never raises for a missing GPU
    (that is reported in the result)."""
    import torch

    out = {"built": native.build_info(), "running": native.runtime_info(), "gpus": []}
    out["running"]["torch"] = torch.__version__
    out["running"]["cudnn_torch"] = (str(torch.backends.cudnn.version())
                                     if torch.backends.cudnn.is_available() else "")
    try:
        torch.cuda.init()
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out["gpus"].append({"index": i, "name": p.name, "cc": f"{p.major}.{p.minor}"})
    except Exception as e:  # no driver / no GPU: report it, --info still succeeds
        out["gpu_error"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
    return out
