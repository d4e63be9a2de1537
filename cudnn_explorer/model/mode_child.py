"""Child process: PyTorch's own run of a whole model in one mode, in a fresh process.

    python -m cudnn_explorer.model.mode_child SPEC.json RESULT.json

PyTorch's benchmark cache lives per process, so each mode gets its own (docs/method.md).
The parent (model/mode_runner.py) sets cudnn-frontend's log (CUDNN_FRONTEND_LOG_INFO,
CUDNN_FRONTEND_LOG_FILE) before this process starts.

SPEC: {"model": ModelSpec dict, "shapes": [[C, H, W], ...] (one per input size, in order),
"mode": "benchmark" | "heuristic" | "deterministic" | "pinned", "benchmark_limit": int | null,
"plans": path (the pinned mode's plan file), "allow_environment": bool,
"pinned_benchmark": bool (the pinned mode's setting for what the file does not cover),
"tf32": bool, "device": int, "seed": int, "iterations": int, "warmup": int,
"log_file": path, "target_ci": float | null, "max_timed_s": float, "steady_only": bool,
"retried": [[C, H, W], ...]}.
With ``target_ci``, timed iterations go on in rounds of ``iterations`` until the 95%
confidence interval of their mean is within +-target_ci of it, or ``max_timed_s`` of
timing has passed. With ``steady_only`` (the parent's second process, Note [steady
process] in model/mode_runner.py) the first iteration is neither probed nor timed, and
the timed iterations are replays of a CUDA graph of the whole step (_graph_step), one
round of eager iterations timed beside them. A capture that fails ends the process
(Note [failed capture]): the size keeps its eager round and says why ("capture_failed"),
for the parent to capture it once more in a fresh process; a shape in ``retried`` (that
second try) whose capture fails is timed eagerly to the target instead, with the reason.

Per shape, in order: the model's first iteration at that shape, synchronised around every
convolution call (its time, the allocator's peak during it, the reserve before and after,
the byte span of the log it wrote); then ``warmup`` iterations and ``iterations`` timed
ones between CUDA events. Note [split backward]: a backward call that computes both
gradients runs as two calls here, one per direction (PyTorch's cuDNN path runs the two as
separate cuDNN calls with separate plan searches anyway), so each search's cost and
memory is its own.

RESULT: a ModelChildResult (core/child_records.py), built from {"torch", "cudnn",
"settings", "error" ("" or why it stopped), "sizes": [{
"input_shape", "first_ms", "before_alloc", "before_reserved", "first_peak_alloc",
"first_peak_reserved", "other_peak_alloc" (the peak outside convolution calls),
"conv_calls", "conv_ms", "calls": [{"problem" (ConvProblem dict), "direction", "layer",
"first" (its pass's first call of that problem and direction: _Probe.call), "ms",
"alloc_before", "peak_alloc", "reserved_before", "reserved_after", "peak_reserved",
"log_span"}], "steady_ms": [...], "warmup", "steady_method" ("eager" or "graph"),
"steady_note", "steady_eager_ms" (with a graph: eager iterations beside it),
"steady_peak_alloc", "steady_peak_reserved" (of eager steady iterations),
"capture_failed" (why)}], "phases_s": {PHASES' name: s}}; with ``steady_only``, no
first-iteration keys.
The result is rewritten after every shape, so a child that dies keeps what finished.
"""
from __future__ import annotations

import sys
import time
from dataclasses import replace
from typing import List

from ..core import stats
from ..core.capture import ModelSpec
from ..core.child_records import ModelChildResult
from ..measure.prestart import HELD
from ..measure.procs import log_size, quick_exit, read_spec, write_result
from ..measure.step_graph import capture_step
from ..measure.tensors import conv_tf32
from . import zoo
from .tracer import (ForwardTracker, backward_directions, conv_args, explored,
                      forward_direction, import_probe_modules, iteration, layer_name)


# Where a model process's run goes (s), summed over its sizes: "setup" (the model built and
# moved to the device, cuDNN loaded, the model pinned), "first iterations" (each size's
# input made and its first iteration, probed or not), "steady iterations" (the warm-up and
# timed eager ones), "CUDA graphs" (a steady process's captures and replays).
PHASES = ("setup", "first iterations", "steady iterations", "CUDA graphs")


class _Phases:
    """The seconds of each of PHASES so far, into ``out["phases_s"]``."""

    def __init__(self, out: dict):
        self.out, self.t = out, time.perf_counter()
        out["phases_s"] = {}

    def end(self, phase: str) -> None:
        """The time since the last end (or the start) is ``phase``'s."""
        now = time.perf_counter()
        d = self.out["phases_s"]
        d[phase] = round(d.get(phase, 0.0) + now - self.t, 3)
        self.t = now

    def skip(self) -> None:
        """The time since the last end is no phase's (a wait its parent counts)."""
        self.t = time.perf_counter()


class _HostEvent:
    """A CUDA event's timing calls on the host clock (a run on the CPU)."""

    def record(self):
        self.t = time.perf_counter()

    def elapsed_time(self, end) -> float:
        return (end.t - self.t) * 1e3


class _NoGpu:
    """torch.cuda's memory, sync and event calls for a run on the CPU (device -1, for
    tests of the child's whole flow): nothing to wait for, nothing allocated on a GPU."""

    def Event(self, enable_timing=True):  # noqa: N802  (torch.cuda's name)
        return _HostEvent()

    def synchronize(self):
        pass

    def reset_peak_memory_stats(self):
        pass

    def max_memory_allocated(self):
        return 0

    memory_allocated = memory_reserved = max_memory_reserved = max_memory_allocated


class _Probe:
    """Times and weighs every convolution call of one iteration."""

    def __init__(self, cuda, log_file, tf32: bool, seen: set):
        self.cuda, self.log, self.tf32, self.seen = cuda, log_file, tf32, seen
        self.calls = []
        self.other_peak = self.other_peak_reserved = 0

    def _fold(self):
        """Sync, note the peaks since the last reset (outside any convolution), reset."""
        cuda = self.cuda
        cuda.synchronize()
        self.other_peak = max(self.other_peak, cuda.max_memory_allocated())
        self.other_peak_reserved = max(self.other_peak_reserved, cuda.max_memory_reserved())
        cuda.reset_peak_memory_stats()

    def call(self, fn, problem, direction: str, layer: str, backward: bool):
        """``fn()``, a call of ``problem`` in ``direction`` from the forward pass, or from
        the backward pass (``backward``): PyTorch's plan caches are per thread, and the
        autograd engine runs the backward pass on its own, so each pass searches a
        problem-direction once (they differ only where a transposed convolution runs it:
        Note [transposed] in model/tracer.py)."""
        cuda = self.cuda
        self._fold()
        a0, r0, s0 = cuda.memory_allocated(), cuda.memory_reserved(), (log_size(self.log) or 0)
        t0 = time.perf_counter()
        out = fn()
        cuda.synchronize()
        ms = (time.perf_counter() - t0) * 1e3
        key = (problem, direction, backward)
        self.calls.append({
            "problem": problem.to_dict(), "direction": direction, "layer": layer,
            "first": key not in self.seen, "ms": ms, "alloc_before": a0,
            "peak_alloc": cuda.max_memory_allocated(), "reserved_before": r0,
            "reserved_after": cuda.memory_reserved(),
            "peak_reserved": cuda.max_memory_reserved(),
            "log_span": [s0, (log_size(self.log) or 0)]})
        self.seen.add(key)
        cuda.reset_peak_memory_stats()
        return out

    def finish(self) -> int:
        self._fold()
        return self.other_peak


def first_iteration(torch, model, inputs, spec: ModelSpec, device: str, probe: _Probe):
    """One iteration with every convolution call timed and weighed by ``probe``."""
    from torch.utils._python_dispatch import TorchDispatchMode

    aten = torch.ops.aten
    tracker = ForwardTracker(model)

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            # a call the capture lists as not covered has no problem: it just runs
            name = func.name() if hasattr(func, "name") else ""
            if func is aten.convolution.default or name == "cudnn_explorer::conv":
                c = conv_args(args, backward=False)
                p = explored(c, probe.tf32)[0]
                if p is not None:
                    return probe.call(lambda: func(*args, **kwargs), p,
                                      forward_direction(c.transposed),
                                      layer_name(tracker.layer(), c.transposed), False)
            elif func is aten.convolution_backward.default or \
                    name == "cudnn_explorer::conv_backward":
                # the pinned op's backward has aten's arguments without bias_sizes
                ours = func is not aten.convolution_backward.default
                full = (*args[:3], None, *args[3:]) if ours else args
                c, mask = conv_args(full, backward=True), full[10]
                p = explored(c, probe.tf32)[0]
                if p is not None and (mask[0] or mask[1]):
                    head = list(args[:9] if ours else args[:10])
                    d_input, d_weight = backward_directions(c.transposed)
                    if mask[0] and mask[1]:  # Note [split backward]
                        gi = probe.call(lambda: func(*head, [True, False, mask[2]]),
                                        p, d_input, "", True)
                        gw = probe.call(lambda: func(*head, [False, True, False]),
                                        p, d_weight, "", True)
                        return gi[0], gw[1], gi[2]
                    return probe.call(lambda: func(*args, **kwargs), p,
                                      d_input if mask[0] else d_weight, "", True)
            return func(*args, **kwargs)

    with tracker, Mode():
        iteration(model, inputs, spec, device)


def _graph_step(torch, model, inputs, spec: ModelSpec, device: str):
    """(replay, "") where one whole step (gradients reset, forward, backward) is captured
    as a CUDA graph, or (None, why): measure/step_graph.py (Note [failed capture] there).
    Every plan is in PyTorch's cache already (the first iteration searched), so the
    capture records the kernels the eager step runs."""
    return capture_step(torch, lambda: iteration(model, inputs, spec, device,
                                                 autocast_cache=False),
                        lambda: model.zero_grad(set_to_none=True), device)


def _timed(cuda, step, iterations: int, target, max_timed_s: float):
    """Samples (ms per iteration, CUDA events around each) of ``step``: rounds of
    ``iterations`` until the mean's 95% CI is within +-``target`` of it (or one round
    without a target), at most ``max_timed_s`` of them."""
    samples = []
    t_timed = time.perf_counter()
    while True:
        events = [(cuda.Event(enable_timing=True),
                   cuda.Event(enable_timing=True)) for _ in range(iterations)]
        for start, end in events:
            start.record()
            step()
            end.record()
        cuda.synchronize()
        samples += [s.elapsed_time(e) for s, e in events]
        if target is None or stats.ci95_halfwidth(samples) <= target * stats.mean(samples) or \
                time.perf_counter() - t_timed > max_timed_s:
            return samples


def _first(torch, cuda, model, inputs, spec: ModelSpec, device: str, probe: _Probe) -> dict:
    """The first iteration at a shape, every convolution call probed: its time, peaks and
    calls (RESULT's per-size keys)."""
    t0 = time.perf_counter()
    first_iteration(torch, model, inputs, spec, device, probe)
    other = probe.finish()
    ms = (time.perf_counter() - t0) * 1e3
    calls = probe.calls
    # the peaks are folded around every call: the iteration's are their maxima
    return dict(first_ms=ms, first_peak_alloc=max([other] + [c["peak_alloc"] for c in calls]),
                first_peak_reserved=max([probe.other_peak_reserved]
                                        + [c["peak_reserved"] for c in calls]),
                other_peak_alloc=other, calls=calls, conv_calls=len(calls),
                conv_ms=sum(c["ms"] for c in calls))


def _warm_up_cudnn(torch, device: str, cuda) -> None:
    """Load cuDNN with a small convolution of a shape no model is likely to run, so that
    the first layer is not charged with loading the library."""
    x = torch.randn(1, 2, 9, 9, device=device)
    w = torch.randn(3, 2, 2, 2, device=device, requires_grad=True)
    torch.nn.functional.conv2d(x, w).sum().backward()
    cuda.synchronize()


# What a spec set up ahead (its "hold", Note [first mode set up ahead] in jobs/sweep.py)
# and its go's spec must agree on: all that the setup used.
SETUP_KEYS = ("model", "mode", "benchmark_limit", "tf32", "device", "seed", "plans",
              "pinned_benchmark", "allow_environment", "steady_only")


def setup_changed(setup: dict, spec: dict) -> List[str]:
    """The SETUP_KEYS on which ``spec`` differs from the ``setup`` a process was set up
    with (empty where the process can run it)."""
    return [k for k in SETUP_KEYS if spec.get(k) != setup.get(k)]


def run(spec: dict, write, hold=None) -> dict:
    """The run of ``spec``, every result through ``write``. With the spec's "hold", the
    setup first, then ``hold()`` says so and returns the go's spec (None: the parent went
    away), whose SETUP_KEYS must be the same; the rest comes from it."""
    import torch

    device_index = int(spec.get("device", 0))
    out: dict = {}
    phases = _Phases(out)
    if device_index < 0:  # on the CPU: the flow without a GPU (tests)
        cuda, device = _NoGpu(), "cpu"
    else:
        torch.cuda.set_device(device_index)
        cuda, device = torch.cuda, f"cuda:{device_index}"
    mode = spec["mode"]
    if mode == "pinned" and not spec.get("plans"):
        raise ValueError("the pinned mode needs the spec's 'plans' (a plan file's path)")
    # the pinned mode: convolutions the plan file does not cover run as the user's
    # benchmark setting says ("pinned_benchmark")
    torch.backends.cudnn.benchmark = mode == "benchmark" or (
        mode == "pinned" and bool(spec.get("pinned_benchmark")))
    torch.backends.cudnn.deterministic = mode == "deterministic"
    if spec.get("benchmark_limit") is not None:
        torch.backends.cudnn.benchmark_limit = int(spec["benchmark_limit"])
    torch.backends.cudnn.allow_tf32 = bool(spec.get("tf32", True))
    mspec = ModelSpec.from_dict(spec["model"])
    out.update({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
                "settings": {"benchmark": torch.backends.cudnn.benchmark,
                             "deterministic": torch.backends.cudnn.deterministic,
                             "benchmark_limit": torch.backends.cudnn.benchmark_limit,
                             "allow_tf32": conv_tf32()},
                "error": "", "sizes": []})
    torch.manual_seed(int(spec.get("seed", 0)) % 2**63)
    model, _ = zoo.build(replace(mspec, sizes=[]), device)
    model.train(mspec.train)
    _warm_up_cudnn(torch, device, cuda)
    if not spec.get("steady_only"):  # Note [imports outside the first iteration]
        import_probe_modules()
    counts = None
    if mode == "pinned":  # every convolution layer through the pinned op
        from ..pinning.modules import pin
        from ..pinning.op import pin_counts

        counts = pin_counts
        # plans built on their first call, as this mode has always measured them, and no
        # kept plans written beside the user's plan file by a measurement
        out["pin_report"] = pin(model, spec["plans"],
                                allow_environment=bool(spec.get("allow_environment")),
                                ahead=False, keep=False).to_dict()
        pin_counts(reset=True)
    phases.end("setup")
    if spec.get("hold"):  # set up ahead of its turn: wait for the go's spec
        final = hold() if hold is not None else None
        if final is None:
            return out
        changed = setup_changed(spec, final)
        if changed:
            raise ValueError(f"the spec changed after the setup ahead of its turn: "
                             f"{', '.join(changed)}")
        spec = final
        phases.skip()  # the wait is the parent's to count
    seen: set = set()
    log = spec.get("log_file")
    iterations, warmup = int(spec.get("iterations", 20)), int(spec.get("warmup", 5))
    target = spec.get("target_ci")
    max_timed_s = float(spec.get("max_timed_s", 60.0))
    steady_only = bool(spec.get("steady_only"))
    retried = [list(s) for s in spec.get("retried", [])]
    for shape in spec["shapes"]:
        one = replace(mspec, input_shape=list(shape), sizes=[])
        size = {"input_shape": list(shape)}
        inputs, stop = None, False
        try:
            inputs = zoo.make_inputs(one, device)
            model.zero_grad(set_to_none=True)
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
            size.update(before_alloc=cuda.memory_allocated(),
                        before_reserved=cuda.memory_reserved())
            if steady_only:  # the first iteration's searches, neither timed nor probed
                iteration(model, inputs, one, device)
            else:
                size.update(_first(torch, cuda, model, inputs, one, device,
                                   _Probe(cuda, log, conv_tf32(), seen)))
            if counts:
                size["pinned_first"] = counts(reset=True).to_dict()
            phases.end("first iterations")

            def step():
                model.zero_grad(set_to_none=True)
                iteration(model, inputs, one, device)

            for _ in range(warmup):
                step()
            cuda.synchronize()
            cuda.reset_peak_memory_stats()
            # The eager iterations first: their peaks are the steady ones (a graph holds a
            # memory pool of its own beside the allocator's). With a graph they are one
            # round beside it, else the steady samples.
            if counts:
                counts(reset=True)
            eager = _timed(cuda, step, iterations, None if steady_only else target,
                           max_timed_s)
            if counts:
                size["pinned_steady"] = counts(reset=True).to_dict()
            size.update(warmup=warmup, steady_peak_alloc=cuda.max_memory_allocated(),
                        steady_peak_reserved=cuda.max_memory_reserved(),
                        steady_ms=eager, steady_method="eager")
            phases.end("steady iterations")
            if steady_only:
                replay, note = (None, "no CUDA graphs on the CPU; timed eagerly") \
                    if device_index < 0 else _graph_step(torch, model, inputs, one, device)
                if replay is not None:
                    size.update(steady_ms=_timed(cuda, replay, iterations, target, max_timed_s),
                                steady_method="graph", steady_eager_ms=eager)
                elif device_index < 0 or list(shape) in retried:
                    # the eager steps, timed to the target
                    size.update(steady_ms=_timed(cuda, step, iterations, target, max_timed_s),
                                steady_note=note)
                else:  # Note [failed capture]: a fresh process captures it once more
                    size.update(capture_failed=note)
                stop = replay is None and device_index >= 0
                replay = None  # the graph and its memory pool go before the next size
                phases.end("CUDA graphs")
        except torch.OutOfMemoryError:
            out["error"] = (f"out of GPU memory at input {'x'.join(map(str, shape))}: try a "
                            f"smaller --batch")
        inputs = None  # freed before the next size's input is made
        if "first_ms" in size or steady_only and "steady_ms" in size:
            out["sizes"].append(size)
        write(out)
        if out["error"] or stop:
            break
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    spec = read_spec(argv, "python -m cudnn_explorer.model.mode_child SPEC.json RESULT.json")
    if spec is None:
        return 2
    # every write goes through the record the parent reads (core/child_records.py): a
    # malformed result fails here, naming its field, and carries its schema and version
    run(spec, lambda res: write_result(
        argv[1], ModelChildResult.from_dict(res, "model child result").to_dict()),
        hold=lambda: _held(argv))
    return 0


def _held(argv):
    """Say HELD on stdout and wait for the go line: the go's spec, re-read (None: stdin
    ended, the parent went away)."""
    print(HELD, flush=True)
    if not sys.stdin.readline():
        return None
    return read_spec(argv, "")


if __name__ == "__main__":
    # Note [quick exit] in measure/procs.py: every result is written, and the
    # cudnn-frontend log as it was written
    quick_exit(main())
