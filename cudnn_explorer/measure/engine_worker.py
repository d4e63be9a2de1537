"""Engine configs explored in a worker process, under a watchdog: the parent's side.

cuDNN accepts knob combinations that then never finish on the GPU: on the H200,
``ConvBwdData_eng77_k17=3_k24=1`` of a float16 channels_last problem stopped the process
inside the config, and a kernel that spins cannot be interrupted from the process that
launched it. So the parent (:func:`explore_isolated`) runs engines.explore_engines in a
worker process (:class:`EngineWorker`; its code is measure/engine_serve.py), which takes
one job per line on its stdin, {"spec": SPEC, "events": EVENTS}, explores that
direction, and appends one JSON line per event to EVENTS: {"say": msg}, {"listed": ...}
once it has listed the engines (core/engine_prior.py), {"start": config} before a
config, {"stage": "running", "cutoff_ms": C} once its plan is built (C > 0: a round-1
candidate, whose launches get a limit from C when that is shorter than the config's
timeout: Note [hung launches] in core/staging.py), {"attempt": result} after it,
{"space": EngineSpace, "retire": bool} at the end, or {"failed": message, "resource":
bool, "retire": bool} for a job that failed outside any config (its tensors did not fit
in the GPU's memory: ResourceError here). A job handed over ahead of its turn
(:func:`hold_isolated`) also says {"prebuilt": tag} after each plan it builds ahead and
{"held": true}, then waits for its go (Note [engine search ahead] in
measure/engine_serve.py). When a config runs past ``config_timeout_s`` (or, its plan
built, past its launches' limit), or the worker dies inside one, the parent kills the
worker's process group, records that config as "hung" or "crashed", and starts a new
worker that carries on from where the last one stopped (``prior``), within the same
overall time budget. Note [a worker short of memory]: a worker that dies saying it ran
out of GPU memory, in a config or outside any, is not replaced: the search stops there
(ResourceError), and so it does after MAX_RESTARTS lost workers (ChildError). Either
error's ``partial`` is the EngineSpace of the configs tried before (None: none were), for
the caller to show and save beside what else finished. Its replacement would meet the
same shortage. On the H100 with 2 GiB free, 21 configs hung or crashed a worker in turn
(67 s) before the search gave up and lost every config it had timed; what ended those
workers was not recorded.

A worker serves every direction it is given when the caller passes the same EngineWorker
(a model sweep does): starting one (Python, torch, the CUDA context, cuDNN) takes
seconds, more than timing the configs PyTorch lists for a direction.
Between jobs it holds no tensors and returns its cached GPU memory; a worker whose CUDA
context a config broke (a sticky error) says so with its last result and is replaced.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from typing import Callable, Dict, List, Optional

from ..core.engine_prior import stopped_space
from ..core.errors import ChildError, ResourceError
from ..core.options import ExploreOptions
from ..core.problem import ConvProblem
from ..core.records import EngineSpace
from ..core.search_preferences import SearchPreferences
from ..core import hangs, staging
from .procs import child_env, describe_rc

__all__ = ["EngineWorker", "explore_isolated", "hold_isolated", "HeldJob",
           "MAX_RESTARTS", "WORKER_MODULE", "short_of_memory"]

MAX_RESTARTS = 20  # failed configs one exploration may survive before it gives up
# How often the parent reads the worker's events (s): the job's end waits for the next
# read, once per direction, 68 times in a ResNet-50 sweep; a read of nothing costs
# microseconds.
POLL_S = 0.005
WORKER_MODULE = "cudnn_explorer.measure.engine_serve"  # the worker process's code


class EngineWorker:
    """One worker process that explores directions one after another (``--serve``); one
    that was killed or died is replaced at the next job. ``close()`` ends it (a later job
    starts another); so does the end of this process, which closes its stdin.

    Note [spare worker]: a replacement spends seconds importing torch before it serves
    (4.2-5.5 s on an H200 host), and the configs that hang come several to a problem (four
    in one float16 problem's search on the H200: docs/limits.md). So once a config has hung
    or crashed a worker (:meth:`keep_spare`), a spare process is kept importing ahead,
    which touches no GPU until it gets a job, and the next replacement is that spare."""

    def __init__(self, module: Optional[str] = None):
        self.module = module or WORKER_MODULE
        self.proc: Optional[subprocess.Popen] = None
        self.err_path = ""
        self._tmp: Optional[tempfile.TemporaryDirectory] = None
        self._jobs = 0  # jobs handed to the running process
        self._spare: Optional[tuple] = None  # (process, its stderr's path)
        self._spare_wanted = False

    def submit(self, spec_path: str, events_path: str) -> subprocess.Popen:
        """Hand the worker one job (starting a worker when there is none); returns its
        process, for the watchdog."""
        job = json.dumps({"spec": spec_path, "events": events_path}) + "\n"
        for _ in range(2):  # a worker that died while idle is replaced once
            if self.proc is None or self.proc.poll() is not None:
                self._start()
            try:
                self.proc.stdin.write(job)
                self.proc.stdin.flush()
                self._jobs += 1
                return self.proc
            except (BrokenPipeError, OSError):
                self.kill()
        raise ChildError(f"the engine worker exits as soon as it starts: {_tail(self.err_path)}")

    def start(self) -> None:
        """Start the worker's process unless it runs (it imports, then waits for a job)."""
        if self.proc is None or self.proc.poll() is not None:
            self._start()

    def keep_spare(self) -> None:
        """From now on keep a spare process ready to replace this one (Note [spare
        worker]); the caller has just lost a worker inside a config."""
        self._spare_wanted = True
        self._refill()

    def _start(self) -> None:
        self.kill()
        self._jobs = 0
        if self._spare is not None and self._spare[0].poll() is None:
            (self.proc, self.err_path), self._spare = self._spare, None
        else:
            self.proc, self.err_path = self._popen()
        self._refill()

    def _refill(self) -> None:
        if self._spare_wanted and (self._spare is None or self._spare[0].poll() is not None):
            self._spare = self._popen()

    def _popen(self) -> tuple:
        if self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="cudnn_explorer_worker_")
        err_path = os.path.join(self._tmp.name, f"stderr.{time.monotonic_ns()}")
        with open(err_path, "w") as err:
            proc = subprocess.Popen([sys.executable, "-m", self.module, "--serve"],
                                    stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, env=child_env(), text=True,
                                    start_new_session=True)
        return proc, err_path

    def kill(self) -> None:
        """End the worker now (its process group: a config may have started others)."""
        if self.proc is not None:
            _end(self.proc)
            self.proc = None

    def close(self, wait_s: float = 10.0) -> None:
        """End the worker: one that served a job finishes at the end of its stdin (within
        ``wait_s``, else it is killed); one that never got a job, still importing or
        waiting, is killed at once (it holds nothing)."""
        if self.proc is not None and self.proc.poll() is None and self._jobs:
            _close_pipe(self.proc)
            try:
                self.proc.wait(timeout=wait_s)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        if self._spare is not None:  # it never got a job: it holds nothing
            _end(self._spare[0])
            self._spare = None
        self._spare_wanted = False
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "EngineWorker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _end(proc: subprocess.Popen) -> None:
    """End a worker's process (group) now, unless it ended, and close its stdin."""
    if proc.poll() is None:
        _kill(proc)
    _close_pipe(proc)


def _close_pipe(proc: subprocess.Popen) -> None:
    try:
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass


def explore_isolated(problem: ConvProblem, direction: str, options: ExploreOptions,
                     preferences: SearchPreferences = SearchPreferences(),
                     start_timeout_s: float = 300.0,
                     progress: Optional[Callable[[str], None]] = None,
                     worker: Optional[EngineWorker] = None,
                     held: Optional["HeldJob"] = None) -> EngineSpace:
    """Explore one direction's engine configs in worker processes (see the module doc),
    timed and checked as ``options`` say (options.timing unchanged), at most
    ``options.engine_configs`` valid configs per engine within ``options.engine_budget_s``,
    searched as ``preferences`` ask (core/search_preferences.py: its preferred tags first).
    ``worker``: the EngineWorker to use, kept for the caller's next direction (default: a
    new one, ended on return). Raises ChildError when a worker fails outside any config
    (e.g. it cannot start, or makes no progress within ``start_timeout_s``), and
    ResourceError when the direction's tensors do not fit in its memory or a worker dies
    out of GPU memory (Note [a worker short of memory]); either error's ``partial`` holds
    the configs tried before it.
    ``options.staged``: a staged search, ``preferences.finalist_tags`` in its final round
    (default: every preferred tag; measure/engines.py). ``preferences.only_preferred``
    (without ``options.engine_sampling``): only the preferred tags, a re-timing of given
    plans. ``held``: this direction's job, handed to ``worker`` ahead by hold_isolated
    with the same arguments, the legacy rows aside (Note [engine search ahead]); it goes
    on from there (cancelled and done afresh where it does not match, or its process is
    gone)."""
    if worker is None:
        with EngineWorker() as own:
            return explore_isolated(problem, direction, options, preferences,
                                    start_timeout_s, progress, own)
    say = progress or (lambda m: None)
    time_budget_s = options.engine_budget_s
    config_timeout_s = options.engine_config_timeout_s
    prior: Dict[str, List[dict]] = {"attempts": [], "failed": []}
    listed: dict = {}  # the engines, as the last worker listed them
    t0 = time.perf_counter()
    try:
        for _ in range(MAX_RESTARTS + 1):
            left = None if time_budget_s is None else \
                max(time_budget_s - (time.perf_counter() - t0), 0.0)
            spec = _spec(problem, direction, options, preferences, left, prior)
            ahead, held = held, None  # the first job only
            if ahead is not None and not ahead.serves(spec, worker):
                ahead.cancel()
                ahead = None
            try:
                space, failed = _one_worker(spec, prior, listed, config_timeout_s,
                                            start_timeout_s, say, worker, ahead)
            except ResourceError:
                if ahead is None:
                    raise
                # its tensors did not fit beside the legacy rows': again, now that those
                # are gone
                space, failed = _one_worker(spec, prior, listed, config_timeout_s,
                                            start_timeout_s, say, worker)
            if space is not None:
                return EngineSpace.from_dict({**space, "time_budget_s": time_budget_s,
                                              "wall_s": time.perf_counter() - t0})
            prior["failed"].append(failed)
            if short_of_memory(failed["message"]):  # Note [a worker short of memory]
                raise ResourceError(f"engine worker for {direction} ran out of GPU memory "
                                    f"in {failed['tag']}: {failed['message']}")
            worker.keep_spare()
            say(f"{direction}: {failed['tag']} {failed['status']}; restarting the worker "
                f"without it")
        raise ChildError(f"engine worker for {direction}: {MAX_RESTARTS + 1} configs hung or "
                         f"crashed it; giving up (see --engine-config-timeout)")
    except (ChildError, ResourceError) as e:  # Note [a worker short of memory]
        e.partial = stopped_space(direction, listed, prior, options.engine_configs,
                                  time_budget_s, options.engine_sampling,
                                  time.perf_counter() - t0)
        raise


def _spec(problem: ConvProblem, direction: str, options: ExploreOptions,
          preferences: SearchPreferences, time_budget_s: Optional[float],
          prior: dict) -> dict:
    """One worker job's spec (what run() reads), within ``time_budget_s``."""
    finalist_tags = preferences.finalist_tags
    return {"problem": problem.to_dict(), "direction": direction,
            "device": options.device, "seed": options.seed,
            "legacy_rows": [r.to_dict() for r in preferences.legacy_rows],
            "preferred_tags": list(preferences.preferred_tags),
            "max_per_engine": options.engine_configs, "time_budget_s": time_budget_s,
            "sample": options.engine_sampling, "staged": options.staged,
            "finalist_tags": None if finalist_tags is None else list(finalist_tags),
            "only_preferred": preferences.only_preferred,
            "timing": asdict(options.timing), "check": options.check, "prior": prior}


class _Job:
    """One job's files (its spec and events, in a temporary folder), handed to
    ``worker``; a context manager that removes the files."""

    def __init__(self, worker: EngineWorker, spec: dict):
        self._tmp = tempfile.TemporaryDirectory(prefix="cudnn_explorer_engines_")
        self.spec = spec
        spec_path = os.path.join(self._tmp.name, "spec.json")
        self.events_path = os.path.join(self._tmp.name, "events")
        try:
            with open(spec_path, "w") as f:
                json.dump(spec, f)
            open(self.events_path, "w").close()
            self.proc = worker.submit(spec_path, self.events_path)
        except BaseException:
            self._tmp.cleanup()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._tmp.cleanup()


# What a held job's listing and plans were made from: its go may change only the rest.
HELD_FIELDS = ("problem", "direction", "device", "seed", "preferred_tags", "max_per_engine",
               "sample", "only_preferred", "check")


class HeldJob(_Job):
    """A job handed to a worker ahead of its go (Note [engine search ahead]): made by
    hold_isolated, then given to explore_isolated (``held``), or cancelled."""

    def __init__(self, worker: EngineWorker, spec: dict):
        super().__init__(worker, dict(spec, hold=True))
        self._waiting = True

    def serves(self, spec: dict, worker: EngineWorker) -> bool:
        """Whether this job can go on as ``spec``: made from the same fields, and its
        process is still ``worker``'s, alive and waiting."""
        return (self._waiting and worker.proc is self.proc and self.proc.poll() is None
                and all(self.spec.get(k) == spec.get(k) for k in HELD_FIELDS))

    def go(self, spec: dict) -> None:
        """Let the worker go on with ``spec``; a worker that died meanwhile is seen by
        the events' reader."""
        self._send({"go": spec})

    def cancel(self) -> None:
        """The job is not wanted: the worker drops it and serves on; its files go."""
        if self._waiting:
            self._send({"cancel": True})
        self._tmp.cleanup()

    def _send(self, msg: dict) -> None:
        self._waiting = False
        try:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            pass


def hold_isolated(problem: ConvProblem, direction: str, options: ExploreOptions,
                  preferences: SearchPreferences = SearchPreferences(),
                  worker: Optional[EngineWorker] = None) -> HeldJob:
    """Hand ``worker`` this direction's engine job ahead (Note [engine search ahead]): it
    lists the engines and builds the plans it will time, and waits. Give the result to
    explore_isolated (``held``, with the same arguments) or cancel() it. The legacy rows
    of ``preferences`` are not sent ahead: they come with the go, from explore_isolated's
    ``preferences``."""
    return HeldJob(worker, _spec(problem, direction, options,
                                 replace(preferences, legacy_rows=()),
                                 options.engine_budget_s, {"attempts": [], "failed": []}))


def short_of_memory(message: str) -> bool:
    """Whether a worker's last words (a CUDA error, torch's OutOfMemoryError) say it ran
    out of GPU memory."""
    return "out of memory" in message.lower()


def _one_worker(spec: dict, prior: dict, listed: dict, config_timeout_s: float,
                start_timeout_s: float, say, worker: EngineWorker,
                held: Optional[HeldJob] = None):
    """Run one job on ``worker`` (``held``: handed to it ahead; it goes now). Returns
    (space as a dict, None) when it finished, or (None, failed-config) when a config hung
    or crashed the worker; appends its attempts to ``prior``, and puts its listing of the
    engines in ``listed``. A job that does not finish
    (an error, Ctrl-C) ends the worker."""
    finished = False
    job = held if held is not None else _Job(worker, spec)
    with job:
        if held is not None:
            held.go(spec)
        with open(job.events_path) as events:
            proc = job.proc
            current, last = None, time.perf_counter()
            stage = ""
            # the current config's deadline (from its events' times, ``last``), and what the
            # message says of its limit
            deadline, within = last + config_timeout_s, f"{config_timeout_s:g} s"
            partial = ""
            try:
                while True:
                    rc = proc.poll()
                    partial += events.read()
                    *lines, partial = partial.split("\n")
                    for line in lines:
                        if not line.strip():
                            continue
                        last = time.perf_counter()
                        ev = json.loads(line)
                        if "say" in ev:
                            say(ev["say"])
                        elif "start" in ev:
                            current = ev["start"]
                            stage = "building its plan (run-time compilation included)"
                            deadline = last + config_timeout_s
                            within = f"{config_timeout_s:g} s"
                        elif "stage" in ev:
                            stage = ("running, timing and checking it"
                                     if ev["stage"] == "running" else ev["stage"])
                            run = _run_limit(ev)
                            if run is not None and last + run[0] < deadline:
                                deadline, within = last + run[0], run[1]
                        elif "listed" in ev:
                            listed.clear()
                            listed.update(ev["listed"])
                        elif "attempt" in ev:
                            prior["attempts"].append(ev["attempt"])
                            current = None
                        elif "retimed" in ev or "prebuilt" in ev:
                            current = None  # a later round's, or a plan built ahead
                        elif "space" in ev:
                            finished = True
                            if ev.get("retire"):  # its CUDA context is lost: a new one next
                                worker.kill()
                            return ev["space"], None
                        elif "failed" in ev:  # outside any config, e.g. out of memory
                            finished = True
                            if ev.get("retire"):
                                worker.kill()
                            error = ResourceError if ev.get("resource") else ChildError
                            raise error(f"engine worker for {spec['direction']}: "
                                        f"{ev['failed']}")
                    now = time.perf_counter()
                    if rc is not None:
                        if current is not None:
                            return None, dict(current, status="crashed", message=(
                                f"the worker process died {stage} ({describe_rc(rc)}); "
                                f"{_tail(worker.err_path)}"))
                        tail = _tail(worker.err_path)
                        error = ResourceError if short_of_memory(tail) else ChildError
                        raise error(f"engine worker for {spec['direction']} failed "
                                    f"({describe_rc(rc)}): {tail}")
                    if current is not None and now > deadline:
                        return None, dict(current, status="hung", message=(
                            f"no result within {within}, stuck {stage}; the worker was "
                            f"killed"))
                    if current is None and now - last > start_timeout_s:
                        raise ChildError(f"engine worker for {spec['direction']} made no "
                                         f"progress in {start_timeout_s:g} s and was killed")
                    time.sleep(POLL_S)
            finally:
                if not finished:
                    worker.kill()


def _run_limit(ev: dict):
    """(seconds, what the message says of them) that a stage event ``ev`` allows from now,
    or None: a round-1 candidate whose plan is built gets its launches' limit from its
    ``cutoff_ms`` (Note [hung launches] in core/staging.py), a config known to hang
    ("known_hang": why) hangs.KNOWN_HANG_LIMIT_S (Note [known hangs] in core/hangs.py),
    the shorter of the two where both apply."""
    cut = float(ev.get("cutoff_ms") or 0.0)
    if ev.get("stage") != "running":
        return None
    limits = []
    if cut > 0:
        run = staging.run_limit_s(cut)
        limits.append((run, f"{run:g} s of its plan's launches (round 1's limit: "
                            f"{staging.ROUND1_LIMIT_LAUNCHES:,} launches of {cut:.3g} ms, 3x "
                            f"the fastest config so far, at least "
                            f"{staging.RUN_LIMIT_FLOOR_S:g} s)"))
    if ev.get("known_hang"):  # Note [known hangs]
        limits.append((hangs.KNOWN_HANG_LIMIT_S, f"{hangs.KNOWN_HANG_LIMIT_S:g} s of its "
                                                 f"plan's launches ({ev['known_hang']})"))
    return min(limits, key=lambda lim: lim[0]) if limits else None


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    proc.wait()


def _tail(path: str) -> str:
    try:
        with open(path, errors="replace") as f:
            lines = [ln for ln in f.read().strip().splitlines() if ln.strip()]
    except OSError:
        lines = []
    return lines[-1][:300] if lines else "no output"
