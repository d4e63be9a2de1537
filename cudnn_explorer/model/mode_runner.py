"""One mode of PyTorch's own run of a model (model/run_modes.py) in its fresh processes
(model/mode_child.py): the first one, which runs the probed first iteration with
cudnn-frontend's log on, and, with a CUDA graph, the steady timing's own (Note [steady
process]), once more from a size whose capture failed (Note [failed capture]). Every
process is started ahead of its turn (Note [model children started ahead])."""
from __future__ import annotations

import json
import os
import subprocess
import time
from dataclasses import dataclass, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from ..core.capture import Capture, ModelSpec
from ..core.child_records import ModelChildResult, SizeResult
from ..core.model_run import AHEAD
from ..core.errors import UserError
from ..core.options import ExploreOptions
from ..measure.prestart import READY_TIMEOUT_S, StartedChild, last_line
from ..measure.procs import describe_rc
from ..measure.pytorch_picks import LOG_VARS, ModeSpec
from . import zoo
from .mode_child import setup_changed
from .tracer import PROBE_IMPORTS

__all__ = ["ModeTiming", "MODEL_CHILD", "WAITED", "WAITED_SETUP", "STEADY_PROCESS", "shapes",
           "preload", "setup_spec", "start_mode", "ModeStarts", "run_mode", "steady",
           "steady_of", "after_failure", "run_child"]

MODEL_CHILD = "cudnn_explorer.model.mode_child"
# A mode's phases_s beside its first process's own (model/mode_child.py's PHASES): the
# seconds it was still importing when its turn came, and the steady process's whole run.
# A process set up ahead of its turn (Note [first mode set up ahead] in jobs/sweep.py)
# has, instead of those and its "setup", the seconds its turn still waited for its
# imports and setup, and its setup's own seconds (core.model_run.AHEAD), spent before
# its turn: not a part of the mode's wall time.
WAITED, STEADY_PROCESS = "waited for its imports", "the steady process"
WAITED_SETUP = "waited for its imports and setup"


def shapes(capture: Capture) -> List[List[int]]:
    """The input shapes (per sample) the capture's model runs at, in order."""
    spec = capture.model
    return [spec.shape_at(s) for s in spec.sizes] if spec.sizes else [list(spec.input_shape)]


# Note [model children started ahead]: PyTorch's run of a model takes one fresh process
# per mode, two with a CUDA graph (Note [steady process]), one after another, and each
# spent seconds importing torch and the model's library before its first iteration: on
# the H200, timm's ConvNeXt-atto's four modes took 14.5-27.0 s each, of which their first
# iterations 3.5-15.9 s. So every process run_model will need is started at once, through
# measure/prestart.py, as the problem children are (Note [children started ahead]): each
# imports and waits, touching no GPU, and gets its spec when its turn comes; the mode's
# time limit counts from then. A process whose turn never comes (an error, Ctrl-C) is
# ended; a steady process tried once more (Note [failed capture]) starts at its turn.
# Started with the run, the first mode's process still waited 10.0 s (timm's sweep above)
# and 10.8 s (ResNet-50's) for its imports; so the model jobs start them before they
# capture the model, and the model command before it imports torch (ModeStarts): in the
# ResNet-50 sweep on the H200 the wait then was 0.0 s.
def preload(model) -> str:
    """What a model process imports ahead (measure/prestart.py): torch, what our child
    imports (not the child itself: runpy would then run a second copy of a module already
    imported), what its probe imports (Note [imports outside the first iteration] in
    model/tracer.py), and the model's library where it is one we know (never the user's own
    module: its import errors are the child's to report)."""
    names = ["torch", *PROBE_IMPORTS, "cudnn_explorer.model.tracer", "cudnn_explorer.model.zoo",
             "cudnn_explorer.core.child_records", "cudnn_explorer.measure.procs"]
    if model.name.startswith(zoo.TIMM):
        names.append("timm")
    elif model.name and not model.factory:
        names.append("torchvision")
    return ",".join(names)


def setup_spec(model: ModelSpec, mode: ModeSpec, device: int, seed: int, tf32: bool) -> dict:
    """The part of a mode's spec (model/mode_child.py's SPEC) that its process's setup
    uses (mode_child.SETUP_KEYS): the whole spec of a process set up ahead of its turn
    (ModeStarts.prepare), and the head of every mode's (run_mode)."""
    spec = {"model": model.to_dict(), "mode": mode.mode,
            "benchmark_limit": mode.benchmark_limit, "tf32": tf32, "device": device,
            "seed": seed}
    if mode.mode == "pinned":  # (the job checked the file's environment against this one)
        spec.update(plans=mode.plans, pinned_benchmark=mode.benchmark, allow_environment=True)
    return spec


@dataclass(frozen=True)
class ModeTiming:
    """How each mode of PyTorch's run of a model runs: ``iterations`` steady iterations
    after ``warmup`` ones; with ``target_ci``, rounds of ``iterations`` until the 95%
    confidence interval of their mean is within +-target_ci of it (a fraction); with
    ``graph``, as replays of a CUDA graph of the whole step where it can be captured
    (Note [steady process]). ``device``: the GPU (None: the options'; -1: the CPU, for
    tests: no cuDNN, no log); ``python``: the children's interpreter (default: this
    one's)."""

    iterations: int = 20
    warmup: int = 5
    target_ci: Optional[float] = None
    graph: bool = False
    device: Optional[int] = None
    python: Optional[str] = None


def run_mode(capture: Capture, mode: ModeSpec, options: ExploreOptions, timing: ModeTiming,
             timeout_s: float, say: Callable[[str], None] = lambda m: None,
             ahead: Optional[Tuple[StartedChild, Optional[StartedChild]]] = None
             ) -> Tuple[ModelChildResult, bytes, str]:
    """(result, log text, error) of one mode's child, run as ``timing`` says (``ahead``:
    its processes, from start_mode; default: started now); the result holds every shape
    that finished even when the child failed later (error then says why). With
    ``timing.graph``, Note [steady
    process]: the steady iterations are timed by a second fresh process of the same mode
    (model/mode_child.py's "steady_only"), which runs no probe: on the H200 a CUDA-graph
    capture after the probed first iteration failed for each model tried (a 3-layer net,
    ResNet-18, ResNet-50), and the same steps captured in processes without it. Its
    results replace the first child's one round of eager steps; where it fails, that round
    stays, with the reason."""
    python, graph, target_ci = timing.python, timing.graph, timing.target_ci
    iterations, warmup = timing.iterations, timing.warmup
    device = options.device if timing.device is None else timing.device
    spec = {**setup_spec(capture.model, mode, device, options.seed, capture.tf32),
            "shapes": shapes(capture), "iterations": iterations, "warmup": warmup,
            "target_ci": None if graph else target_ci, "max_timed_s": 60.0}
    pinned = mode.mode == "pinned"
    what = f"PyTorch's run of the model ({mode.label})"
    first, second = ahead or start_mode(capture.model, mode.mode == "pinned", python, graph)
    try:
        t0 = time.perf_counter()
        if first.prepared is not None and (
                setup_changed(first.prepared, spec)
                or not first.wait_held(timeout_s + READY_TIMEOUT_S)):
            # set up for another spec (the capture's TF32 setting), or it failed in its
            # setup (e.g. out of memory beside the capture): one started now, as before
            say(f"PyTorch's run of the model: {mode.label}: the process set up ahead "
                f"could not serve; set up anew")
            first.close()
            first = _started(capture.model, python, log=not pinned)
        ahead_used = first.prepared is not None
        waited = time.perf_counter() - t0
        result, error = _result(first, spec, timeout_s, what)
        phases = dict(result.phases_s)
        if ahead_used:  # Note [first mode set up ahead]: its setup was not in its turn
            own = {k: v for k, v in phases.items() if k not in (WAITED, "setup")}
            phases = {AHEAD: phases.get("setup", 0.0),
                      WAITED_SETUP: round(waited + phases.get(WAITED, 0.0), 3), **own}
        text = first.log_bytes()
        first.close()  # its files go before the steady process runs
        if result.sizes and not text.strip() and not pinned:
            error = error or (f"{what} wrote no cudnn-frontend log "
                              f"(CUDNN_FRONTEND_LOG_INFO); cannot tell what PyTorch chose")
        if graph and result.sizes:
            say(f"PyTorch's run of the model: {mode.label}: steady steps as a CUDA graph, in "
                f"a process of their own")
            t0 = time.perf_counter()
            timed, why = steady(dict(spec, target_ci=target_ci, steady_only=True),
                                [s.input_shape for s in result.sizes], timeout_s, python,
                                f"the steady timing's own process ({mode.label})", say,
                                capture.model, second)
            # each size's steady iterations are the steady process's where it timed them
            result = replace(result, sizes=[steady_of(s, timed.get(tuple(s.input_shape)), why)
                                            for s in result.sizes])
            phases[STEADY_PROCESS] = round(time.perf_counter() - t0, 3)
        return replace(result, phases_s=phases), text, error
    finally:
        first.close()
        if second is not None:
            second.close()


def start_mode(model: ModelSpec, pinned: bool, python: Optional[str], graph: bool
               ) -> Tuple[StartedChild, Optional[StartedChild]]:
    """A mode's processes for ``model``, started now: the first one and, with ``graph``,
    its steady timing's own (Note [steady process]). Note [pinned runs without the log]:
    cudnn-frontend's log writes at every execution of a graph's plan, the pinned op's path,
    and slowed the pinned mode's eager steps alone (ResNet-50 on the H200: 35.5 against
    23.8 ms per eager step). The op's own record says what ran, so the ``pinned`` mode
    runs without it; a steady process never needs it."""
    first = _started(model, python, log=not pinned)
    try:
        return first, _started(model, python, log=False) if graph else None
    except BaseException:
        first.close()
        raise


class ModeStarts:
    """The processes of PyTorch's run of ``model``, started before the model is captured
    (Note [model children started ahead]): they import while the parent captures. One
    mode per entry of ``pinned`` (whether the mode at that position is the pinned one),
    each as start_mode starts it. run_model takes position k's with ``take(k, graph)``;
    ``close()`` ends those never taken (a mode answered from the results store, an
    error). A context manager: it closes on exit."""

    def __init__(self, model: ModelSpec, pinned: Sequence[bool], python: Optional[str] = None,
                 graph: bool = False):
        self.graph = graph
        self._model, self._pinned, self._python = model, list(pinned), python
        self._ahead: Dict[int, Tuple[StartedChild, Optional[StartedChild]]] = {}
        try:
            for k, p in enumerate(pinned):
                self._ahead[k] = start_mode(model, p, python, graph)
        except BaseException:
            self.close()
            raise

    def prepare(self, k: int, spec: dict) -> bool:
        """Set position ``k``'s first process up now on ``spec`` (setup_spec's; Note
        [first mode set up ahead] in jobs/sweep.py); False where none is started for it."""
        if k not in self._ahead:
            return False
        self._ahead[k][0].prepare(spec)
        return True

    def let_go(self, k: int) -> bool:
        """End position ``k``'s first process where it was set up (prepare), giving back
        the GPU memory its setup holds, and start a fresh one in its place, which imports
        and waits for its turn (Note [capture before the setup] in jobs/sweep.py); False
        where none was set up."""
        if k not in self._ahead or self._ahead[k][0].prepared is None:
            return False
        first, second = self._ahead.pop(k)
        first.close()  # (ends the process: its CUDA context and memory go with it)
        try:
            fresh = _started(self._model, self._python, log=not self._pinned[k])
        except BaseException:
            if second is not None:
                second.close()
            raise
        self._ahead[k] = (fresh, second)
        return True

    def take(self, k: int, graph: bool) -> Optional[Tuple[StartedChild, Optional[StartedChild]]]:
        """Position ``k``'s processes (None: none started for it, or not for ``graph``)."""
        return self._ahead.pop(k, None) if graph == self.graph else None

    def close(self) -> None:
        for first, second in self._ahead.values():
            first.close()
            if second is not None:
                second.close()
        self._ahead.clear()

    def __enter__(self) -> "ModeStarts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def steady_of(size: SizeResult, t: Optional[SizeResult], why: str) -> SizeResult:
    """``size`` of the first process with the steady iterations of the steady process's
    ``t`` (None: it timed none, ``why``; the first process's eager round stays)."""
    if t is None:
        return replace(size, steady_note=f"{why}; one round of eager steps from the first "
                                         f"process instead")
    return replace(size, steady_ms=t.steady_ms, steady_method=t.steady_method,
                   steady_note=t.steady_note, steady_eager_ms=t.steady_eager_ms)


def steady(spec: dict, sizes: List[List[int]], timeout_s: float, python: Optional[str],
           what: str, say: Callable[[str], None], model=None,
           ahead: Optional[StartedChild] = None) -> Tuple[Dict[tuple, SizeResult], str]:
    """Per shape, its steady timing from steady processes (model/mode_child.py's
    "steady_only"), and why the shapes missing from it are missing. Note [failed capture]:
    a failed capture ends its process; the next one begins at that size and captures it
    once more (on the H200 a size whose capture failed after others in one process was
    captured in a process of its own), timing it eagerly if that fails too; the sizes
    after it go on there. At most two processes per size."""
    timed: Dict[tuple, SizeResult] = {}
    first_failure: Dict[tuple, str] = {}
    todo, why = list(sizes), ""
    while todo:
        try:
            steady, why = run_child(
                dict(spec, shapes=todo, retried=[list(k) for k in first_failure]),
                model, timeout_s, python, what, ahead)
        finally:  # a later try (Note [failed capture]) starts a process of its own
            if ahead is not None:
                ahead.close()
                ahead = None
        done = steady.sizes
        for t in done:
            key = tuple(t.input_shape)
            if t.capture_failed is not None:
                first_failure[key] = t.capture_failed
                say(f"{what}: {t.capture_failed} at input {'x'.join(map(str, key))}; "
                    f"captured once more in a fresh process")
                continue
            if key in first_failure:
                t = replace(t, steady_note=after_failure(first_failure[key], t))
            timed[key] = t
        last = done[-1] if done else None
        if last is None or why and last.capture_failed is None:
            break  # the process failed: the rest keep the first process's round, with why
        todo = todo[todo.index(list(last.input_shape)) + (last.capture_failed is None):]
    return timed, why


def after_failure(first: str, t: SizeResult) -> str:
    """The note of a size whose first capture failed (Note [failed capture]), from its
    second try's result ``t``."""
    again = "in a fresh process that began at this size"
    if t.steady_method == "graph":
        return f"{first}; captured {again}"
    second = t.steady_note
    if not second or second == first:
        return f"{first}, and again {again}; timed eagerly"
    return f"{first}, and again {again} ({second}); timed eagerly"


def run_child(spec: dict, model, timeout_s: float, python: Optional[str], what: str,
               ahead: Optional[StartedChild] = None) -> Tuple[ModelChildResult, str]:
    """(result, error) of one model/mode_child.py process without cudnn-frontend's log on
    ``spec`` (``ahead``: one started before, else one started now): the sizes that
    finished, also when it failed later."""
    child = ahead or _started(model, python, log=False)
    try:
        return _result(child, spec, timeout_s, what)
    finally:
        child.close()


def _started(model, python: Optional[str], log: bool) -> StartedChild:
    """A model process started now; ``log``: cudnn-frontend's log on, into its own file."""
    return StartedChild(MODEL_CHILD, preload(model), python,
                        (lambda path: dict(CUDNN_FRONTEND_LOG_INFO="1",
                                           CUDNN_FRONTEND_LOG_FILE=path)) if log else None,
                        "frontend.log", drop=LOG_VARS)


def _result(child: StartedChild, spec: dict, timeout_s: float, what: str
            ) -> Tuple[ModelChildResult, str]:
    """(result, error) of ``child`` run on ``spec``: the sizes that finished, also when
    it failed later, its phases_s led by the seconds waited for its imports (WAITED).
    ``timeout_s`` counts from its go, after its imports."""
    error, waited = "", None
    try:
        rc, stderr, waited, _ = child.go(dict(spec, log_file=child.log_path), timeout_s)
        if rc != 0:
            error = f"{what} failed ({describe_rc(rc)}): {last_line(stderr)}"
    except subprocess.TimeoutExpired:
        error = f"{what} did not finish within {timeout_s:g} s and was killed; raise " \
                f"--child-timeout"
    result = ModelChildResult()
    if os.path.exists(child.result_path):
        try:
            with open(child.result_path) as f:
                result = ModelChildResult.read(json.load(f), "result")
        except (ValueError, UserError) as e:
            error = error or f"{what} wrote a malformed result: {e}"
    error = error or result.error
    if not result.sizes and not error:
        error = f"{what} exited without a result"
    if waited is not None:
        result = replace(result, phases_s={WAITED: round(waited, 3), **result.phases_s})
    return result, error
