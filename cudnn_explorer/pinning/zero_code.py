"""The process side of zero-code adoption: what the start-up hook (startup.py) switches
on once the program has imported torch. Every ``torch.nn.functional.conv*`` call of the
process (every ``nn.Conv*`` layer, code compiled by torch.compile) runs through the
pinned op, recording (no plans: each call counted under its key) or pinned (a plan file's
plans); at exit the process writes its part of the record, or says its one line and
writes its report and misses.

Note [checked when CUDA starts]: a plan file is read and loaded when torch is imported
(no CUDA needed), but checked against this GPU, and its plans built ahead, only when the
program starts CUDA itself (``torch.cuda._lazy_call``): a launcher (torchrun) or a
DataLoader worker that never touches the GPU starts no CUDA context because of us.
"""
from __future__ import annotations

import atexit
import fcntl
import json
import os
import signal
import sys
import threading
import warnings
from dataclasses import replace
from typing import Optional

from ..core.errors import ExplorerError
from ..core.files import write_atomic
from ..core.pin_report import PinCounts
from ..core.zero_code import (ConvRecord, RecordedConv, RunReport, Settings, Unkeyed,
                              exit_line, per_process, pid_host)
from . import functional, op
from .layer_names import LayerNames

__all__ = ["activate", "counts_since_start", "part_record"]

_STATE = {"settings": None, "mode": None, "baseline": None, "steps": 0, "not_loaded": "",
          "done": False, "plans": None, "names": None}
_LOCK = threading.Lock()


def _say(text: str) -> None:
    print(f"cudnn_explorer: {text}", file=sys.stderr, flush=True)


def counts_since_start() -> PinCounts:
    """The op's counts of this process: a forked child's less what its parent had counted
    when it forked (the child inherits the counters)."""
    now = op.pin_counts()
    base = _STATE["baseline"]
    if base is None:
        return now
    had = {(tuple(d.key), d.reason): d for d in base.directions}
    rows = []
    for d in now.directions:
        b = had.get((tuple(d.key), d.reason))
        if b is not None:
            d = replace(d, pinned_calls=d.pinned_calls - b.pinned_calls,
                        fallback_calls=d.fallback_calls - b.fallback_calls)
        if d.pinned_calls or d.fallback_calls:
            rows.append(d)
    return PinCounts(directions=rows)


def part_record(counts: PinCounts, steps: int, layers: Optional[dict] = None) -> ConvRecord:
    """This process's part of the record, from the op's counts, with the layers that ran
    each key where known (``layers``: per key tuple, names)."""
    pid, host = pid_host()
    layers = layers or {}
    return ConvRecord(
        convs=[RecordedConv(key=list(d.key), description=d.description,
                            calls=d.pinned_calls + d.fallback_calls,
                            layers=list(layers.get(tuple(d.key), ())))
               for d in counts.directions if d.key],
        unkeyed=[Unkeyed(reason=d.reason, calls=d.fallback_calls)
                 for d in counts.directions if not d.key],
        steps=steps, host=host, pid=pid)


def _append_misses(path: str, counts: PinCounts) -> None:
    """The problem-directions that fell back, as one record part on one line of
    ``path`` (appended under a lock: ranks share the file)."""
    missed = PinCounts(directions=[d for d in counts.directions if d.fallback_calls and d.key])
    if not missed.directions:
        return
    line = part_record(missed, _STATE["steps"]).to_json(indent=None) + "\n"
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(line)


def _finish() -> None:
    """At exit (or SIGTERM): write this process's part or report, once."""
    with _LOCK:
        if _STATE["done"] or _STATE["mode"] is None:
            return
        _STATE["done"] = True
    s: Settings = _STATE["settings"]
    try:
        counts = counts_since_start()
        if _STATE["mode"] == "record":
            names = _STATE.get("names")
            layers = (names.by_key([d.key for d in counts.directions if d.key])
                      if names else None)
            part = part_record(counts, _STATE["steps"], layers)
            if part.convs or part.unkeyed:  # a worker that ran none writes nothing
                os.makedirs(s.record_dir, exist_ok=True)
                write_atomic(os.path.join(s.record_dir, f"part-{part.host}-{part.pid}.json"),
                             part.to_json())
            return
        if not counts.calls and not _STATE["not_loaded"]:
            return  # a launcher or a worker: nothing to say
        pid, host = pid_host()
        report = RunReport(counts=counts, plans=s.plans, not_loaded=_STATE["not_loaded"],
                           host=host, pid=pid)
        _say(exit_line(report)[len("cudnn_explorer: "):])
        if s.report:
            write_atomic(per_process(s.report, pid), json.dumps(report.to_dict(), indent=1))
        if s.misses:
            _append_misses(s.misses, counts)
    except (OSError, ExplorerError) as e:
        _say(f"could not write what this process ran: {e}")


def _on_sigterm(signum, frame) -> None:
    """Write what finished, then die of SIGTERM as the program would have."""
    _finish()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


def _count_step(optimizer, args, kwargs) -> None:
    _STATE["steps"] += 1
    s: Settings = _STATE["settings"]
    if s.steps and _STATE["steps"] >= s.steps:
        _say(f"stopping the program after {_STATE['steps']} optimizer steps "
             f"(CUDNN_EXPLORER_STEPS={s.steps})")
        raise SystemExit(0)


def _check_environment() -> None:
    """When the program starts CUDA (Note [checked when CUDA starts]): the plan file's
    environment against this GPU's, then the plans built ahead."""
    from .ahead import kept_file_of
    from .modules import NOT_CHECKED, _build_ahead, _differences

    s: Settings = _STATE["settings"]
    try:
        diffs = [d for d in _differences(_STATE["plans"]) if d != NOT_CHECKED]
        if diffs and not s.allow_environment:
            _unload(f"plan file '{s.plans}' is from another environment: {'; '.join(diffs)} "
                    f"(CUDNN_EXPLORER_ALLOW_ENVIRONMENT=1 uses it anyway)")
            return
        _build_ahead(None, s.ahead, kept_file_of(s.keep, s.plans))
    except ExplorerError as e:
        _unload(str(e))
    except Exception as e:  # noqa: BLE001  (inside torch's lazy CUDA init: Note [hook never
        _unload(f"internal error: {type(e).__name__}: {e}")  # breaks the program])


def _unload(why: str) -> None:
    """The plan file cannot be used: say so; run unpinned, or exit 2 when strict."""
    s: Settings = _STATE["settings"]
    _STATE["not_loaded"] = why
    if s.strict:
        _say(f"error: CUDNN_EXPLORER_PLANS: {why} (CUDNN_EXPLORER_STRICT=1: stopping)")
        _STATE["done"] = True
        raise SystemExit(2)
    _say(f"CUDNN_EXPLORER_PLANS: {why}; running unpinned")
    op.load_recorder()  # calls still counted, for the exit line and the misses


def _start_run(s: Settings) -> None:
    from .modules import plan_file

    try:
        plans = plan_file(s.plans)
        op.load_plans(plans, strict=s.strict)
        _STATE["plans"] = plans
    except ExplorerError as e:
        _unload(str(e))
        return
    import torch

    torch.cuda._lazy_call(_check_environment)


def activate(s: Settings) -> None:
    """Switch recording (``s.mode`` "record") or pinning ("run") on for this process:
    every functional convolution through the op, from now to exit (the routing context
    is entered and never left)."""
    if _STATE["mode"] is not None or not s.mode:
        return
    import torch

    _STATE["settings"] = s
    try:
        if s.mode == "record":
            op.load_recorder()
            names = LayerNames()  # Note [layer names without the model]
            names.install()
            functional.OBSERVER[0] = names.observe
            functional.TRACE_OBSERVER[0] = names.observe_traced
            _STATE["names"] = names
            warnings.filterwarnings("ignore", message=r"cudnn_explorer: .* runs PyTorch's own "
                                                      r"convolution")
        else:
            _start_run(s)
            # the exit line counts these calls with their reason; a warning that points
            # into the tool at each new reason would only repeat it
            warnings.filterwarnings("ignore", message=r"cudnn_explorer: .* runs PyTorch's own "
                                                      r"convolution, not a pinned plan: its "
                                                      r"tensors are not on a CUDA device")
    except ExplorerError as e:  # the extension cannot load here: the program runs as is
        _say(f"{e}; the program runs without cudnn_explorer")
        return
    _STATE["mode"] = s.mode
    routing = functional.process_routing()  # entered for good: kept, or GC would leave it
    routing.__enter__()
    _STATE["routing"] = routing
    atexit.register(_finish)
    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)
    from torch.optim.optimizer import register_optimizer_step_post_hook

    register_optimizer_step_post_hook(_count_step)
    os.register_at_fork(before=_snapshot, after_in_child=_forked)


_SNAPSHOT: list = [None]


def _snapshot() -> None:
    try:
        _SNAPSHOT[0] = op.pin_counts()
    except Exception:  # noqa: BLE001  (a fork must go on)
        _SNAPSHOT[0] = None


def _forked() -> None:
    """A forked child counts from here (Note: its counters start as its parent's)."""
    _STATE["baseline"] = _SNAPSHOT[0]
    _STATE["steps"] = 0
