"""PyTorch's own choice for a problem, in every mode, each measured in a fresh child.

PyTorch's benchmark cache lives per process and ignores the benchmark flag once a shape
has run (docs/method.md, "PyTorch's choice"), so each mode runs in its own child
process (measure/problem_child.py) with cudnn-frontend's or cuDNN's log switched on; the parent reads
the child's measurements and its log, and names the plan or algorithm PyTorch ran.
"""
from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass, replace
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence

from ..core import logs
from ..core.errors import ChildError
from ..core.knobs import match_kernels
from ..core.child_records import Checked, FirstCall, ProblemChildResult
from ..core.errors import UserError
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.records import AlgoResult, PyTorchPick
from .prestart import StartedChild, last_line
from .procs import describe_rc

__all__ = ["ModeSpec", "ModeRun", "default_modes", "run_child", "run_children", "pick_of",
           "engine_pick", "start_children"]
CHILD_MODULE = "cudnn_explorer.measure.problem_child"
PRELOAD = ("torch,cudnn_explorer.measure.tensors,cudnn_explorer.measure.timing,"
           "cudnn_explorer.measure.kernels,cudnn_explorer._C")  # what our child imports
# ahead (not a fake); the extension names the kernels of a captured graph (measure/kernels.py)
# Variables the child must not inherit from the user's shell: they change what it logs.
LOG_VARS = ("CUDNN_FRONTEND_LOG_INFO", "CUDNN_FRONTEND_LOG_FILE", "CUDNN_LOGLEVEL_DBG",
             "CUDNN_LOGDEST_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGERR_DBG", "CUDNN_LOGWARN_DBG",
             "TORCH_CUDNN_V8_API_DISABLED", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT")


@dataclass(frozen=True)
class ModeSpec:
    label: str
    mode: str                       # benchmark | heuristic | deterministic | pinned
    legacy: bool = False            # TORCH_CUDNN_V8_API_DISABLED=1
    benchmark_limit: Optional[int] = None  # None: PyTorch's default
    # the pinned mode (a model's run only): the plan file, the hash of its contents, and
    # the benchmark setting of the convolutions it does not cover
    plans: str = ""
    plans_sha: str = ""
    benchmark: bool = False

    @property
    def api(self) -> str:
        """PyTorchPick.api of this mode's picks."""
        return "legacy" if self.legacy else "engine"


def default_modes(benchmark_limit: Optional[int] = None) -> List[ModeSpec]:
    """benchmark (PyTorch's default limit, or ``benchmark_limit``), benchmark timing every
    candidate (limit 0) unless that is the first already, heuristics, deterministic, and
    PyTorch's legacy (cudnnFind) path with benchmark on."""
    first = "benchmark" if benchmark_limit is None else f"benchmark, limit {benchmark_limit}"
    specs = [ModeSpec(first, "benchmark", False, benchmark_limit)]
    if benchmark_limit != 0:
        specs.append(ModeSpec("benchmark, limit 0 (all)", "benchmark", False, 0))
    specs += [ModeSpec("heuristics (benchmark off)", "heuristic"),
              ModeSpec("deterministic", "deterministic"),
              ModeSpec("legacy API, benchmark", "benchmark", True, benchmark_limit)]
    return specs


class _Child:
    """One mode's child process, started ahead (Note [children started ahead] in
    measure/prestart.py): it imports and waits until run()."""

    def __init__(self, problem: ConvProblem, spec: ModeSpec, options: ExploreOptions,
                 python: Optional[str], child_module: str):
        self.spec, self.timeout_s = spec, options.child_timeout_s
        self.what = f"PyTorch child ({spec.label})"
        if spec.legacy:
            def log_env(path):
                return dict(TORCH_CUDNN_V8_API_DISABLED="1", CUDNN_LOGLEVEL_DBG="3",
                            CUDNN_LOGDEST_DBG=path)
        else:
            def log_env(path):
                return dict(CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE=path)
        self.child = StartedChild(child_module,
                                  PRELOAD if child_module == CHILD_MODULE else "", python,
                                  log_env, "api.log" if spec.legacy else "frontend.log",
                                  drop=LOG_VARS)
        self.log, self.proc = self.child.log_path, self.child.proc
        self._spec = {"problem": problem.to_dict(), "directions": list(options.directions),
                      "mode": spec.mode, "benchmark_limit": spec.benchmark_limit,
                      "device": options.device, "seed": options.seed,
                      "timing": asdict(options.timing), "check": options.check,
                      "log_file": None if spec.legacy else self.log}

    def run(self) -> ProblemChildResult:
        """Let it run; its result with its log_text, or ChildError."""
        what = self.what
        try:  # the time limit is the mode's own run
            rc, stderr, waited, ran = self.child.go(self._spec, self.timeout_s)
        except subprocess.TimeoutExpired:
            raise ChildError(f"{what} did not finish within {self.timeout_s:g} s and was "
                             f"killed; raise --child-timeout or use --no-pytorch") from None
        if rc != 0:
            raise ChildError(f"{what} failed ({describe_rc(rc)}): {last_line(stderr)}")
        result_path = self.child.result_path
        if not os.path.exists(result_path):
            raise ChildError(f"{what} exited without writing its result")
        try:
            with open(result_path) as f:
                result = ProblemChildResult.read(json.load(f), "result")
        except (ValueError, UserError) as e:
            raise ChildError(f"{what} wrote a malformed result: {e}") from None
        text = ""
        if os.path.exists(self.log):
            with open(self.log, errors="replace") as f:
                text = f.read()
        if not text.strip():
            which = ("cuDNN API log (CUDNN_LOGLEVEL_DBG)" if self.spec.legacy
                     else "cudnn-frontend log (CUDNN_FRONTEND_LOG_INFO)")
            raise ChildError(f"{what} wrote no {which}; cannot tell what PyTorch chose")
        return replace(result, log_text=text, ready_wait_s=waited, run_s=ran)

    def close(self) -> None:
        """End the process if it still runs (an error, Ctrl-C), close its pipes and remove
        its files."""
        self.child.close()


def run_child(problem: ConvProblem, spec: ModeSpec, options: ExploreOptions,
              python: Optional[str] = None,
              child_module: str = CHILD_MODULE) -> ProblemChildResult:
    """Run one mode in a fresh process, for ``options.directions``, timed and checked as
    ``options`` say (the same TimingSpec as our rows). Returns the child's result with
    its log_text (the cudnn-frontend or cuDNN API log). Raises ChildError on a crash, a
    hang (after ``options.child_timeout_s``), no result, a malformed one, or no log."""
    child = _Child(problem, spec, options, python, child_module)
    try:
        return child.run()
    finally:
        child.close()


class ModeRun(NamedTuple):
    """One mode's run for one problem: its child's result (None when it failed, or where
    ``picks`` holds the picks already built) or the error. ``picks``: PyTorch's pick per
    direction, built once from a model's run (model/run_modes.py), which pick_of returns
    as they are."""

    spec: ModeSpec
    result: Optional[ProblemChildResult]
    error: str = ""
    picks: Optional[Dict[str, PyTorchPick]] = None


def start_children(problem: ConvProblem, options: ExploreOptions,
                   child_module: str = CHILD_MODULE) -> List["_Child"]:
    """Every mode's child of run_children(problem, options), started now, to import while
    the caller does (pass them as run_children's ``ahead``; close() those unused)."""
    started: List[_Child] = []
    try:
        for spec in default_modes(options.benchmark_limit):
            started.append(_Child(problem, spec, options, None, child_module))
    except BaseException:
        for child in started:
            child.close()
        raise
    return started


def run_children(problem: ConvProblem, options: ExploreOptions,
                 progress: Optional[Callable[[str], None]] = None,
                 child_module: str = CHILD_MODULE, ahead: Sequence["_Child"] = ()
                 ) -> List[ModeRun]:
    """Every mode of default_modes(options.benchmark_limit), each in a fresh child, one
    after another, every mode's process started at once, ahead of its turn (Note
    [children started ahead] in measure/prestart.py); ``ahead``: those children, started
    earlier by start_children with the same problem and options (default: started now).
    A mode whose child fails keeps its error; the other modes' results are kept."""
    specs = default_modes(options.benchmark_limit)
    runs: List[ModeRun] = []
    started = list(ahead) or start_children(problem, options, child_module)
    try:
        for spec, child in zip(specs, started):
            if progress:
                progress(f"PyTorch child: {spec.label}")
            try:
                runs.append(ModeRun(spec, child.run()))
            except ChildError as e:
                runs.append(ModeRun(spec, None, str(e)))
            finally:
                child.close()
    finally:
        for child in started[len(runs):]:  # an error or Ctrl-C: those that never ran
            child.close()
    return runs


def pick_of(run: ModeRun, direction: str, legacy_rows: Sequence[AlgoResult] = ()) -> PyTorchPick:
    """PyTorch's pick for one direction in one mode, from the child's result, its log and
    our legacy rows (with .kernels): what ran, what it cost, which of our rows launch the
    same kernels, and its check against the reference. A run whose ``picks`` were built
    already (a model's run) gives them as they are."""
    spec = run.spec
    base = dict(label=spec.label, mode=spec.mode, api=spec.api)
    if run.picks is not None:
        return run.picks.get(direction) or PyTorchPick(
            **base, benchmark_limit=spec.benchmark_limit,
            error=run.error or f"the run made no {direction} call of this problem")
    if run.result is None:
        return PyTorchPick(**base, benchmark_limit=spec.benchmark_limit, error=run.error)
    result = run.result
    dres = result.direction(direction)
    if not spec.legacy:
        # The first search of this direction is the one written during the first call
        # (later calls hit PyTorch's cache and log no search).
        s = None if dres is None else next(
            (x for x in logs.parse_frontend_log(result.log_text) if x.direction == direction),
            None)
        return engine_pick(spec, result.settings, direction, dres, s, legacy_rows)
    base["benchmark_limit"] = _limit(spec, result.settings)
    if dres is None:
        return PyTorchPick(**base, error=f"the child measured no {direction}")
    found: dict = {}
    error = ""
    c = logs.legacy_choice(logs.parse_api_log(result.log_text), direction)
    if c is None:
        error = "the cuDNN API log shows no convolution call for this direction"
    else:
        algo = f"{c.algo_name} ({c.math_type})"
        row = next((r for r in legacy_rows if f"{r.algo_name} ({r.math_type})" == algo),
                   None)
        found = dict(legacy_algo=algo, plan_workspace_bytes=c.workspace_bytes,
                     deterministic=row.deterministic if row else None)
    return _pick(base, dres, legacy_rows, error, found)


def engine_pick(spec: ModeSpec, settings: dict, direction: str, call: Optional[FirstCall],
                search: Optional["logs.FrontendSearch"],
                legacy_rows: Sequence[AlgoResult] = ()) -> PyTorchPick:
    """PyTorch's pick for one direction in one engine-API mode, from its first call's
    measurements (``call``, None: it made none) and the plan search that call logged
    (``search``, parsed once by the caller; None: none in the log)."""
    base = dict(label=spec.label, mode=spec.mode, api=spec.api,
                benchmark_limit=_limit(spec, settings))
    if call is None:
        return PyTorchPick(**base, error=f"the child measured no {direction}")
    found: dict = {}
    error = ""
    if search is None:
        error = ("no plan search for this direction in the cudnn-frontend log (was the "
                 "shape already cached?)")
    else:
        s = search
        w = s.candidate(s.winner) if s.winner else None
        found = dict(
            engine_tag=s.winner, heuristic_candidates=s.heuristic_count,
            fallback_candidates=s.fallback_count,
            candidates=[dict(tag=c.tag, numeric_notes=c.numeric_notes,
                             behavior_notes=c.behavior_notes,
                             workspace_bytes=c.workspace_bytes, source=c.source)
                        for c in s.candidates],
            timed=[[t, ms] for t, ms in s.timed])
        if w is not None:
            found.update(plan_workspace_bytes=w.workspace_bytes,
                         numeric_notes=w.numeric_notes, behavior_notes=w.behavior_notes,
                         deterministic=w.deterministic)
        elif s.winner is None:
            error = "the log shows no plan that ran"
    return _pick(base, call, legacy_rows, error, found)


def _limit(spec: ModeSpec, settings: dict) -> Optional[int]:
    """The benchmark limit the child ran with (benchmark mode only)."""
    return settings.get("benchmark_limit") if spec.mode == "benchmark" else None


def _pick(base: dict, call: FirstCall, legacy_rows, error: str, found: dict) -> PyTorchPick:
    check = call.check or Checked()
    return PyTorchPick(
        **base, error=error, first_call_ms=call.first_call_ms,
        first_peak_alloc_bytes=call.first_peak_alloc_bytes,
        first_reserved_growth_bytes=call.first_reserved_growth_bytes,
        steady=call.steady, steady_peak_alloc_bytes=call.steady_peak_alloc_bytes,
        kernels=list(call.kernels), same_kernels_as=match_kernels(call.kernels, legacy_rows),
        max_error=check.max_error, tolerance=check.tolerance,
        output_finite=check.output_finite, **found)
