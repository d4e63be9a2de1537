"""The record and run jobs: a command run unchanged with the start-up hook's variables
set (pinning/startup.py), then what its processes wrote merged into one record or one report.

Note [the hook checked first]: where the command is a Python interpreter (``python``,
``python3.11``, a path to one), that interpreter is asked first, with the command's
environment and its interpreter options (``-S``, ``-I``), in a process of its own,
whether the start-up hook runs in it: a Python without the hook's .pth would run the
whole script, perhaps for hours, and record or pin nothing; the command is refused. A
script whose ``#!`` line names a Python (torchrun, ``./train.py``) has that one asked the
same, but since a launcher may start another Python (``conda run``, ``poetry run``), a
no there is a warning, and the command runs. Other commands (a shell script) are checked
after the fact (the record verb says when no process recorded anything).

Note [the command's process group]: the command runs in a session of its own, so that
a time limit or a Ctrl-C reaches every process it started (torchrun's ranks, their
subprocesses) at once: SIGTERM for the time limit, SIGINT for Ctrl-C. Each process
writes its part when it exits, SIGTERM included (pinning/zero_code.py).
"""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from ..core.errors import UserError
from ..core.files import read_text
from ..core.schema import utc_now
from ..core.version import __version__
from ..core.zero_code import (ConvRecord, RunReport, merge_records, merge_reports,
                              VALUED_OPTIONS, python_command, settings_from)
from .events import Notify, notifier

__all__ = ["RecordResult", "RunResult", "record", "run_pinned", "read_parts"]


@dataclass(frozen=True)
class RecordResult:
    """What ``record`` made: the merged record, the command's exit status, and whether
    the time limit ended it (``stopped``)."""

    record: ConvRecord
    status: int
    stopped: bool = False


@dataclass(frozen=True)
class RunResult:
    """What ``run_pinned`` made: the report merged over the command's processes (None
    when none ran a convolution), and the command's exit status."""

    report: Optional[RunReport]
    status: int


def _check_command(command: Sequence[str]) -> List[str]:
    command = list(command)
    if not command:
        raise UserError("give the command to run after --, e.g. -- python train.py")
    if shutil.which(command[0]) is None and not os.path.isfile(command[0]):
        raise UserError(f"command '{command[0]}': not found on PATH")
    return command


_PYTHON = re.compile(r"python[0-9.]*$")
# exits 0 where the start-up hook ran in this Python (it imports the lean package only)
_PROBE = "import sys; sys.exit(0 if 'cudnn_explorer.pinning.startup' in sys.modules else 83)"


def _probe_options(words: Sequence[str]) -> List[str]:
    """The interpreter's options in ``words`` (what follows a Python) that the probe runs
    with: all but -i and -x (an interactive prompt would answer for it; -x would skip its
    first line)."""
    opts, out, i = python_command(words)[0], [], 0
    while i < len(opts):
        if opts[i] in VALUED_OPTIONS:  # the option and its value, as they are
            out += opts[i:i + 2]
            i += 2
            continue
        o = opts[i] if opts[i].startswith("--") else \
            "-" + opts[i][1:].replace("i", "").replace("x", "")
        if o != "-":
            out.append(o)
        i += 1
    return out


def _shebang(path: str) -> List[str]:
    """The words of ``path``'s ``#!`` line, ``env`` and its own options and settings left
    out (``#!/usr/bin/env -S A=1 python3 -u``: python3, -u); [] where there is none."""
    try:
        with open(path, "rb") as f:
            first = f.readline(512)
    except OSError:
        return []
    if not first.startswith(b"#!"):
        return []
    words = first[2:].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":
        words, rest = [], iter(words[1:])
        for w in rest:
            if words or not (w.startswith("-") or "=" in w):  # the program, then its words
                words.append(w)
            elif w in ("-u", "--unset", "-C", "--chdir"):  # env's own, with a value
                next(rest, None)
    return words


def _python_of(command: Sequence[str], env: Dict[str, str]) -> Tuple[List[str], bool]:
    """The Python ``command`` runs with its interpreter options ([] where it names none),
    and whether the command is that Python itself (not a script whose ``#!`` names it)."""
    program = command[0]
    if _PYTHON.match(os.path.basename(program)):
        return [program, *_probe_options(command[1:])], True
    path = shutil.which(program, path=env.get("PATH"))
    words = _shebang(path) if path else []
    if words and _PYTHON.match(os.path.basename(words[0])):
        return [words[0], *_probe_options(words[1:])], False
    return [], False


def _check_hook(command: List[str], env: Dict[str, str]) -> str:
    """Note [the hook checked first]: UserError where the command is a Python that would
    not run the start-up hook; the warning to give where a ``#!`` line names such a
    Python; "" otherwise, and where the probe cannot tell (the interpreter fails to start,
    or hangs: the command runs and says so itself)."""
    python, itself = _python_of(command, env)
    if not python:
        return ""
    try:
        probe = subprocess.run([*python, "-c", _PROBE], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    if probe.returncode != 83:
        return ""
    shown = " ".join(python)
    fix = (f"run '{python[0]} -m cudnn_explorer hook install', or install cudnn_explorer "
           f"into that Python")
    if itself:
        raise UserError(f"the start-up hook does not run in '{shown}' (no "
                        f"cudnn_explorer_hook.pth in its site-packages): {fix}")
    return (f"the start-up hook does not run in '{shown}', which '{command[0]}' names on its "
            f"#! line: where the command's Pythons are that one, they record and pin nothing "
            f"({fix})")


def _warn(notify: Optional[Notify], text: str) -> None:
    if text:
        notifier(notify)("warning", text)


def _execute(command: List[str], env: Dict[str, str], time_limit: Optional[float]):
    """(exit status, stopped by the time limit): Note [the command's process group]."""
    proc = subprocess.Popen(command, env=env, start_new_session=True)
    try:
        try:
            return proc.wait(timeout=time_limit), False
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            return proc.returncode, True
    except KeyboardInterrupt:
        _signal_group(proc, signal.SIGINT)
        proc.wait()
        raise


def _signal_group(proc, sig) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def _status(code: int) -> int:
    """A shell's exit status for ``code`` (a signal's death: 128 + its number)."""
    return 128 - code if code < 0 else code


def read_parts(folder: str) -> List[ConvRecord]:
    """The record parts the processes wrote into ``folder``."""
    return [ConvRecord.read(read_text(p, "record part"), f"record part '{p}'")
            for p in sorted(glob.glob(os.path.join(folder, "part-*.json")))]


def record(command: Sequence[str], steps: int = 0, time_limit: Optional[float] = None,
           environ: Optional[Dict[str, str]] = None,
           notify: Optional[Notify] = None) -> RecordResult:
    """Run ``command`` with recording on in each of its Python processes; the record of
    every convolution they ran, merged (what the processes wrote before an interrupt
    too: KeyboardInterrupt carries it as ``partial``). ``steps``: stop after that many
    optimizer steps in each process; ``time_limit``: seconds, then SIGTERM; ``notify``
    hears a warning before the command runs (Note [the hook checked first])."""
    command = _check_command(command)
    if steps < 0 or (time_limit is not None and time_limit <= 0):
        raise UserError(f"steps {steps} / time limit {time_limit}: give positive values")
    env = dict(os.environ if environ is None else environ)
    env.pop("CUDNN_EXPLORER_PLANS", None)
    with tempfile.TemporaryDirectory(prefix="cudnn_explorer-record-") as folder:
        env["CUDNN_EXPLORER_RECORD"] = folder
        if steps:
            env["CUDNN_EXPLORER_STEPS"] = str(steps)
        settings_from(env)  # a bad variable fails here, before the command runs
        _warn(notify, _check_hook(command, env))
        try:
            status, stopped = _execute(command, env, time_limit)
        except KeyboardInterrupt as e:
            e.partial = _merged(folder, command)
            raise
        return RecordResult(record=_merged(folder, command), status=_status(status),
                            stopped=stopped)


def _merged(folder: str, command: List[str]) -> ConvRecord:
    return merge_records(read_parts(folder), command=command, created=utc_now(),
                         tool_version=__version__)


def run_pinned(command: Sequence[str], plans: str, strict: bool = False, ahead: int = 1,
               keep: bool = True, allow_environment: bool = False,
               misses: Optional[str] = None,
               environ: Optional[Dict[str, str]] = None,
               notify: Optional[Notify] = None) -> RunResult:
    """Run ``command`` with every convolution of its Python processes pinned to the plan
    file ``plans`` (read and checked first: UserError when it cannot be used); the
    report merged over the processes. ``misses``: the file the problem-directions that
    fell back are appended to ("" for none; default: the plan file's path + .misses)."""
    command = _check_command(command)
    from ..pinning.modules import plan_file

    plan_file(plans)  # missing or corrupt: UserError now, not once per process
    env = dict(os.environ if environ is None else environ)
    env.pop("CUDNN_EXPLORER_RECORD", None)
    env.update({"CUDNN_EXPLORER_PLANS": plans, "CUDNN_EXPLORER_STRICT": str(int(strict)),
                "CUDNN_EXPLORER_AHEAD": str(ahead), "CUDNN_EXPLORER_KEEP": str(int(keep)),
                "CUDNN_EXPLORER_ALLOW_ENVIRONMENT": str(int(allow_environment)),
                "CUDNN_EXPLORER_MISSES": plans + ".misses" if misses is None else misses})
    with tempfile.TemporaryDirectory(prefix="cudnn_explorer-run-") as folder:
        env["CUDNN_EXPLORER_REPORT"] = os.path.join(folder, "report-%p.json")
        settings_from(env)
        _warn(notify, _check_hook(command, env))
        status, _ = _execute(command, env, None)
        reports = [RunReport.read(read_text(p, "run report"), f"run report '{p}'")
                   for p in sorted(glob.glob(os.path.join(folder, "report-*.json")))]
    return RunResult(report=merge_reports(reports) if reports else None,
                     status=_status(status))


def report_json(report: RunReport) -> str:
    return json.dumps(report.to_dict(), indent=1) + "\n"
