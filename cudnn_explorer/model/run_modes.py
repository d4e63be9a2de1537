"""PyTorch's own run of a whole model: one fresh child per mode (model/mode_child.py), not one
per problem.

Each child runs the model's first iteration and then steady iterations, with
cudnn-frontend's log on. From its result and its log this builds, once:

* the ModelRun record (core/model_run.py): per mode and input size, the first iteration's
  time and peak memory, each convolution's first call (the plan PyTorch cached, the
  search's candidates, its cost), the call that set the memory peak, the steady
  iterations;
* per unique problem, a ModeRun per mode holding PyTorch's pick per direction
  (measure.pytorch_picks.engine_pick, as a per-problem child's is built), from the
  searches parsed out of the log for the ModelRun's calls: the log is parsed once. The
  exploration pipeline takes them as they are (pick_of). A pick's steady time is our
  re-timing of the engine config with the same tag (DirectionResult.pick_timing).
"""
from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..core import logs
from ..core.capture import Capture
from ..core.child_records import CallResult, FirstCall, ModelChildResult, SizeResult
from ..core.stability import Stability
from ..core.errors import ChildError, ExplorerError, UserError
from ..core.model_run import ConvCall, IterationTiming, ModelModeRun, ModelRun, SizeRun
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.records import PyTorchPick, rankable
from ..core.search_preferences import SearchPreferences
from ..measure.prestart import StartedChild
from ..measure.pytorch_picks import ModeRun, ModeSpec, default_modes, engine_pick
from ..measure.pipeline import GpuBench
from .mode_runner import ModeStarts, ModeTiming, run_mode, shapes, start_mode

__all__ = ["model_modes", "modes_of", "run_model", "ModeTiming", "run_key", "StoreCache",
           "ModelBench", "retime_plans"]
LOG_READ = "the log read"  # a mode's phase: its cudnn-frontend log read into PyTorch's picks


def model_modes(benchmark_limit: Optional[int] = None,
                every_candidate: bool = True) -> List[ModeSpec]:
    """The per-problem modes on the engine API: benchmark at the requested limit, with
    every candidate timed (limit 0; not with ``every_candidate`` False, unless that is
    the requested limit), heuristics, deterministic."""
    return [m for m in default_modes(benchmark_limit) if not m.legacy and (
        every_candidate or m.mode != "benchmark" or m.benchmark_limit == benchmark_limit)]


def modes_of(options: ExploreOptions) -> List[ModeSpec]:
    """model_modes as ``options`` set them (their benchmark limit, and whether benchmark
    with every candidate timed runs: a profile's choice)."""
    return model_modes(options.benchmark_limit, options.every_candidate_mode)


# One size's calls' plan searches, in call order (None: not a first call, or none logged)
Searches = List[Optional[logs.FrontendSearch]]


def _search(log: bytes, span, direction: str) -> Optional[logs.FrontendSearch]:
    text = log[span[0]:span[1]].decode("utf-8", "replace")
    return next((s for s in logs.parse_frontend_log(text) if s.direction == direction), None)


def searches_of(result: ModelChildResult, log: bytes) -> List[Searches]:
    """Per input size, each call's plan search from the log, parsed once: the first
    search of its direction in the log its first call wrote (later calls hit PyTorch's
    cache and log none). Both the ModelRun's calls and PyTorch's picks are built from
    these."""
    return [_searches(size, log) for size in result.sizes]


def _searches(size: SizeResult, log: bytes) -> Searches:
    logged = _logged(log)
    return [_search(log, c.log_span, c.direction) if c.first and logged else None
            for c in size.calls]


def _logged(log: bytes) -> bool:
    """Whether the log holds anything but blanks (without copying it, as strip() would:
    a model run's log can be tens of MB)."""
    return bool(log) and not log.isspace()


def _conv_call(raw: CallResult, index: Dict[ConvProblem, int],
               s: Optional[logs.FrontendSearch]) -> ConvCall:
    found = dict(problem=index.get(raw.problem, -1), direction=raw.direction,
                 layer=raw.layer or "", first=raw.first, ms=raw.ms,
                 alloc_before_bytes=raw.alloc_before, peak_alloc_bytes=raw.peak_alloc,
                 reserved_before_bytes=raw.reserved_before,
                 reserved_after_bytes=raw.reserved_after)
    if s is not None:
        w = s.candidate(s.winner) if s.winner else None
        big = s.largest_workspace()
        found.update(plan=s.winner or "", candidates=len(s.candidates), timed=len(s.timed),
                     largest_candidate_bytes=big.workspace_bytes if big else 0,
                     plan_workspace_bytes=w.workspace_bytes if w else None)
    return ConvCall(**found)


def _size_run(raw: SizeResult, index: Dict[ConvProblem, int], searches: Searches) -> SizeRun:
    if raw.first_ms is None:
        raise ChildError(f"PyTorch's run of the model sent input "
                         f"{'x'.join(map(str, raw.input_shape))} without its first iteration")
    calls = [_conv_call(c, index, s) for c, s in zip(raw.calls, searches)]
    if raw.pinned_first is not None:  # the pinned mode: the plan each call ran, by its key
        from ..core.plans import native_key_of

        ran = {tuple(d.key): d.ran for d in raw.pinned_first.directions
               if d.pinned_calls and d.ran}
        calls = [replace(cc, plan=ran.get(tuple(native_key_of(c.problem, c.direction)), ""))
                 for cc, c in zip(calls, raw.calls)]
    peak = max(calls, key=lambda c: c.peak_alloc_bytes, default=None)
    if peak is not None and peak.peak_alloc_bytes <= (raw.other_peak_alloc or 0):
        peak = None  # the iteration peaked outside any convolution call
    steady = raw.steady_ms
    return SizeRun(
        input_shape=list(raw.input_shape), first_ms=raw.first_ms,
        before_alloc_bytes=raw.before_alloc or 0, before_reserved_bytes=raw.before_reserved or 0,
        first_peak_alloc_bytes=raw.first_peak_alloc or 0,
        first_peak_reserved_bytes=raw.first_peak_reserved or 0,
        calls=[c for c in calls if c.first], peak_call=peak,
        conv_calls=raw.conv_calls or 0, conv_ms=raw.conv_ms or 0.0,
        steady=IterationTiming(samples_ms=list(steady), warmup=raw.warmup,
                               method=raw.steady_method, note=raw.steady_note,
                               eager_ms=list(raw.steady_eager_ms))
        if steady else None,
        steady_peak_alloc_bytes=raw.steady_peak_alloc,
        steady_peak_reserved_bytes=raw.steady_peak_reserved, pinned=raw.pinned_first)


def _picks(result: ModelChildResult, index: Dict[ConvProblem, int],
           searches: List[Searches], mode: ModeSpec) -> Dict[int, Dict[str, PyTorchPick]]:
    """Per unique problem, PyTorch's pick per direction in ``mode``, built once from the
    first calls' measurements and the searches already parsed out of the log
    (searches_of). A direction that both passes search (a transposed convolution's
    problem, see _Probe.call) is the first search's."""
    picks: Dict[int, Dict[str, PyTorchPick]] = {}
    for size, found in zip(result.sizes, searches):
        for c, s in zip(size.calls, found):
            i = index.get(c.problem)
            if i is None or not c.first or c.direction in picks.get(i, {}):
                continue
            call = FirstCall(direction=c.direction, first_call_ms=c.ms,
                             first_peak_alloc_bytes=max(c.peak_alloc - c.alloc_before, 0),
                             first_reserved_growth_bytes=c.reserved_after - c.reserved_before)
            picks.setdefault(i, {})[c.direction] = engine_pick(mode, result.settings,
                                                               c.direction, call, s)
    return picks


def run_model(capture: Capture, options: ExploreOptions, timing: ModeTiming = ModeTiming(),
              modes: Optional[List[ModeSpec]] = None,
              progress: Optional[Callable[[str], None]] = None, cache=None,
              share: Optional[Sequence[int]] = None, started: Optional[ModeStarts] = None
              ) -> Tuple[ModelRun, Dict[ConvProblem, List[ModeRun]]]:
    """Every mode of ``modes`` (default modes_of(options)), each the model's own run in a
    fresh child, as ``timing`` says (mode_runner.ModeTiming: its iterations, warmup,
    target_ci, CUDA graph, device and interpreter), in at most
    ``options.child_timeout_s`` per input size, plus a minute of timing with a
    target_ci. Returns the ModelRun and, per unique problem, one ModeRun per mode for
    the pipeline. A mode whose child fails keeps its error (and the sizes that
    finished); the others go on. ``cache``: an object with lookup(key) -> (run dict,
    per-problem dict, created) or None, and save(key, label, run dict, per-problem dict)
    (the results store, see StoreCache): a mode's run of the same capture, options and
    environment is answered from it, and each finished one is kept. ``share``: only the
    modes at these positions (the others are left out of what is returned): a rank's
    part of the modes under torchrun, kept in ``cache`` for every rank to read. Every
    process the modes not answered from ``cache`` need is started at once, each run in
    its turn (Note [model children started ahead]); ``started``: those of ``modes``
    already started (by position), taken from there (the caller closes what is left)."""
    turns = _Turns(capture, options, timing, cache, progress or (lambda m: None))
    runs: Dict[ConvProblem, List[ModeRun]] = {u.problem: [] for u in capture.problems}
    todo = []
    for k, mode in enumerate(modes or modes_of(options)):
        if share is None or k in share:
            key = run_key(capture, mode, k, options, timing.iterations, timing.warmup,
                          timing.target_ci, timing.graph)
            todo.append((k, mode, key, _stored(cache.lookup(key) if cache is not None
                                               else None, turns.say)))
    # Note [model children started ahead]
    ahead: Dict[int, Tuple[StartedChild, Optional[StartedChild]]] = {}
    try:
        for k, mode, _, hit in todo:
            if hit is None:
                ahead[k] = (started.take(k, timing.graph) if started is not None
                            else None) or start_mode(capture.model, mode.mode == "pinned",
                                                     timing.python, timing.graph)
        for k, mode, key, hit in todo:
            per = turns.run(mode, key, hit, ahead.get(k))
            if mode.mode == "pinned":  # the pinned mode is the model's run only
                continue
            for u in capture.problems:
                i = turns.index[u.problem]
                if i in per:
                    runs[u.problem].append(ModeRun(mode, None, picks=per[i]))
                else:
                    runs[u.problem].append(ModeRun(mode, None, turns.done[-1].error or (
                        f"{mode.label}: the model's run reached no call of this problem")))
    finally:  # those whose turn never came (an error, Ctrl-C)
        for first, steady in ahead.values():
            first.close()
            if steady is not None:
                steady.close()
    return ModelRun(modes=turns.done, iterations=timing.iterations, warmup=timing.warmup,
                    target_ci=timing.target_ci), runs


class _Turns:
    """run_model's modes in their turns: what they share (the capture, the options, the
    timing, the store's cache, the progress) and the runs ``done`` so far."""

    def __init__(self, capture: Capture, options: ExploreOptions, timing: ModeTiming,
                 cache, say: Callable[[str], None]):
        self.capture, self.options, self.timing = capture, options, timing
        self.cache, self.say = cache, say
        self.index = {u.problem: i for i, u in enumerate(capture.problems)}
        self.done: List[ModelModeRun] = []
        self.timeout_s = options.child_timeout_s * len(shapes(capture))
        if timing.target_ci is not None:
            self.timeout_s += 60.0 * len(shapes(capture))

    def run(self, mode: ModeSpec, key: str, hit, ahead) -> Dict[int, Dict[str, PyTorchPick]]:
        """One mode: its run appended to ``done`` (from the results store when ``hit``,
        else from its processes ``ahead``), and per problem its picks per direction."""
        say, done = self.say, self.done
        if hit is not None:  # answered from the results store
            stored, per = hit
            say(f"PyTorch's run of the model: {mode.label}: from the results store "
                f"(measured {stored.stored})")
            done.append(stored)
            return per
        say(f"PyTorch's run of the model: {mode.label}")
        t0 = time.perf_counter()
        result, log, error = run_mode(self.capture, mode, self.options, self.timing,
                                      self.timeout_s, say, ahead)
        t1 = time.perf_counter()
        searches = searches_of(result, log)
        sizes = [_size_run(s, self.index, f) for s, f in zip(result.sizes, searches)]
        # without a log nothing says what PyTorch chose; a later failure keeps the rest.
        # A pinned run is not PyTorch's choice: no problem's pick
        per = (_picks(result, self.index, searches, mode)
               if _logged(log) and mode.mode != "pinned" else {})
        t2 = time.perf_counter()
        limit = result.settings.get("benchmark_limit", mode.benchmark_limit)
        done.append(ModelModeRun(label=mode.label, mode=mode.mode,
                                 benchmark_limit=limit if mode.mode == "benchmark" else None,
                                 error=error, sizes=sizes, wall_s=round(t2 - t0, 3),
                                 phases_s=dict(result.phases_s,
                                               **{LOG_READ: round(t2 - t1, 3)})))
        if self.cache is not None and done[-1].ok and not error:
            self.cache.save(key, mode.label, done[-1].to_dict(),
                            {str(i): {d: p.to_dict() for d, p in ps.items()}
                             for i, ps in per.items()})
        return per


def _stored(hit, say) -> Optional[Tuple[ModelModeRun, Dict[int, Dict[str, PyTorchPick]]]]:
    """A stored mode's run as records: (its ModelModeRun, marked stored, and per problem
    its picks per direction), or None when there is none or it does not read (then the
    mode runs again)."""
    if hit is None:
        return None
    run_dict, per_raw, created = hit
    try:
        run = replace(ModelModeRun.from_dict(run_dict, "stored model run"), stored=created)
        return run, {int(i): {str(d): PyTorchPick.from_dict(p, f"stored pick {i} {d}")
                              for d, p in ps.items()} for i, ps in per_raw.items()}
    except (UserError, ValueError, TypeError, AttributeError) as e:
        say(f"a stored run of the model does not read ({e}); it runs again")
        return None


def run_key(capture: Capture, mode: ModeSpec, position: int, options: ExploreOptions,
            iterations: int, warmup: int, target_ci: Optional[float],
            graph: bool = False) -> str:
    """What decides a mode's run of a model, less the environment (the store adds that):
    the model, its unique problems, the mode, its place among the modes (a repeat is a
    run of its own) and how it was timed. A hash of their canonical JSON."""
    import hashlib

    doc = {"model": capture.model.to_dict(), "tf32": capture.tf32,
           "problems": [u.problem.to_dict() for u in capture.problems],
           "mode": [mode.label, mode.mode, mode.benchmark_limit, position],
           **({"plans": [mode.plans_sha, mode.benchmark]} if mode.mode == "pinned" else {}),
           "iterations": iterations, "warmup": warmup, "target_ci": target_ci,
           "seed": options.seed,
           # what the store keeps per problem: PyTorch's picks (a key without it named
           # the per-problem child records kept before, which are not read)
           "per_problem": "picks"}
    if graph:  # runs whose graph was captured in the probed process, before Note [steady
        doc["graph"] = "own process"  # process], are not reused
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class StoreCache:
    """run_model's cache in the results store, for one environment; a store that fails
    is dropped after one warning (``warn``), and the runs go on."""

    def __init__(self, store, env, model: str, warn: Callable[[Exception], None],
                 read: bool = True):
        self.store, self.env, self.model, self.warn = store, env, model, warn
        self.read = read  # False (--refresh): run again, and keep the new runs

    def lookup(self, key: str):
        if self.store is None or not self.read:
            return None
        try:
            return self.store.lookup_model_run(key, self.env)
        except ExplorerError as e:
            self.warn(e)
            self.store = None
            return None

    def save(self, key: str, label: str, run: dict, per_problem: dict) -> None:
        if self.store is None:
            return
        try:
            self.store.save_model_run(key, self.env, self.model, label, run, per_problem)
        except ExplorerError as e:
            self.warn(e)
            self.store = None


class ModelBench(GpuBench):
    """The pipeline's bench for a model's problems: PyTorch's picks come from the model's
    own run (``runs``, per problem), not from a child per problem."""

    def __init__(self, device: int, runs: Dict[ConvProblem, List[ModeRun]], worker=None,
                 env=None):
        super().__init__(device, keep_worker=True, worker=worker, env=env)
        self.runs = runs

    def prestart(self, problem: ConvProblem, options: ExploreOptions) -> None:
        """The engine worker only: no problem child runs here (children())."""
        super().prestart(problem, options.updated(pytorch=False))

    def children(self, problem: ConvProblem, options: ExploreOptions, say) -> List[ModeRun]:
        if problem not in self.runs:
            raise ChildError("this problem was not in the model's run")
        return self.runs[problem]


def retime_plans(capture: Capture, counts, options: ExploreOptions,
                 progress: Optional[Callable[[str], None]] = None) -> List[Stability]:
    """A Stability per (problem, direction, plan counts) of ``counts`` (plan_counts), each
    unstable one's plans re-timed in steady state here (the engine-config worker, the listed configs only: the plans first, then those
    cuDNN's heuristics list), by ``options``' timing method."""
    from ..measure.engine_worker import EngineWorker

    say = progress or (lambda m: None)
    with EngineWorker() as worker:  # one worker for them all
        return [Stability(p, d, c, _retimed(capture, p, d, c, options, say, worker))
                for p, d, c in counts]


def _retimed(capture: Capture, problem: int, direction: str, counts: Dict[str, int],
             options: ExploreOptions, say, worker) -> Dict[str, float]:
    """The steady medians (ms) of the plans in ``counts``, where there are two or more."""
    from ..measure.engine_worker import explore_isolated

    if len(counts) <= 1:
        return {}
    u = capture.problems[problem]
    # every plan in full: the plans PyTorch picked are what is compared (no staged search)
    one = options.updated(directions=(direction,), engine_sampling=False, staged=False)
    say(f"re-timing the {len(counts)} plans PyTorch picked for #{problem + 1} {direction}")
    try:
        space = explore_isolated(u.problem, direction, one,
                                 SearchPreferences(preferred_tags=list(counts)),
                                 progress=say, worker=worker)
    except ExplorerError as e:
        say(f"#{problem + 1} {direction}: {e}")
        return {}
    times = {}
    for tag in counts:
        c = space.config(tag)
        if c is not None and rankable(c):
            times[tag] = c.time
    return times
