"""A child process started ahead of its turn: ``python -m cudnn_explorer.measure.prestart
[--preload NAME,...] MODULE ARG...`` imports the modules NAME (e.g. torch), says READY
on its stdout, waits for one line on its stdin, then runs MODULE as ``__main__`` with
ARG... as its command line.

Note [children started ahead]: PyTorch's modes run one after another, each in a fresh
process (measure/pytorch_picks.py), and importing torch takes seconds of each (about 5 s
on an H200's host), more than most modes take to run (2-3 s for the default problem). So
every mode's process is started at once, before the parent imports torch
itself: each imports and waits, touching no GPU (CUDA starts when the module runs), so
it disturbs no measurement, and each mode still runs in a process of its own, its
environment set at start. (Started one ahead, a mode that runs for less than an import
takes leaves the next one still importing.) A parent that goes away before the line comes
ends it (end of stdin: exit 0, nothing run). A model's run starts its mode processes the
same way (Note [model children started ahead] in model/mode_runner.py).
"""
from __future__ import annotations

import importlib
import json
import os
import runpy
import select
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, Optional, Sequence, Tuple

from .procs import child_env

__all__ = ["main", "READY", "HELD", "READY_TIMEOUT_S", "PRESTART", "wait_ready",
           "StartedChild", "last_line"]
READY = "cudnn_explorer: ready"
# what a child set up ahead of its turn says once it waits for its go (StartedChild.prepare)
HELD = "cudnn_explorer: held"
READY_TIMEOUT_S = 120.0  # importing torch on a busy host
PRESTART = "cudnn_explorer.measure.prestart"


def wait_ready(proc, timeout_s=None, mark: str = READY, seen: bytearray = None) -> bool:
    """In the parent: wait until a child started ahead (a subprocess.Popen with pipes)
    says ``mark`` (READY) on a line of its stdout, or exits, or ``timeout_s`` (default
    READY_TIMEOUT_S) passes: then its own time limit covers the rest. Whether it said it.

    Its stdout is read from the pipe itself (os.read), never through the file object's
    buffer: a buffered readline takes every line already in the pipe, and select() then
    waits for more while the next mark sits read in the buffer (a child set up ahead says
    READY and HELD back to back). ``seen``: the bytes read after a mark, kept for the
    next wait on the same child (where one is passed)."""
    deadline = time.monotonic() + (READY_TIMEOUT_S if timeout_s is None else timeout_s)
    buf = seen if seen is not None else bytearray()
    want = mark.encode()
    fd = proc.stdout.fileno()
    while True:
        while b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            if line.strip() == want:
                return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            return False
        chunk = os.read(fd, 4096)
        if not chunk:  # it exited
            return False
        buf += chunk


class StartedChild:
    """In the parent: ``python -m cudnn_explorer.measure.prestart --preload PRELOAD MODULE
    SPEC RESULT``, started now, in a temporary folder of its own (``spec_path``,
    ``result_path``, ``log_path``). ``log_env(log_path)`` gives the variables that turn
    its library's log on into ``log_name`` there (None: no log); ``drop``: variables it
    must not inherit."""

    def __init__(self, module: str, preload: str = "", python: Optional[str] = None,
                 log_env: Optional[Callable[[str], Dict[str, str]]] = None,
                 log_name: str = "child.log", drop: Sequence[str] = ()):
        self._tmp = tempfile.TemporaryDirectory(prefix="cudnn_explorer_")
        tmp = self._tmp.name
        self.spec_path, self.result_path = (os.path.join(tmp, "spec.json"),
                                            os.path.join(tmp, "result.json"))
        self.log_path = os.path.join(tmp, log_name) if log_env else None
        env = child_env(drop=drop)
        if log_env:
            env.update(log_env(self.log_path))
        self.proc = subprocess.Popen(
            [python or sys.executable, "-m", PRESTART, "--preload", preload, module,
             self.spec_path, self.result_path], env=env, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.prepared: Optional[dict] = None  # the spec it was set up with (prepare)
        self._held = False
        self._seen = bytearray()  # its stdout read past the last mark (wait_ready)

    def prepare(self, spec: dict) -> None:
        """Let the child begin now on ``spec`` with "hold" set: a module that knows it
        (model/mode_child.py) sets up as the spec says, says HELD and waits for its go,
        then reads the spec file again (go's). The go line is queued now: the child takes
        it once its imports are done."""
        if self.prepared is not None:
            return  # one setup per process
        with open(self.spec_path, "w") as f:
            json.dump(dict(spec, hold=True), f)
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        self.prepared = dict(spec)

    def wait_held(self, timeout_s: float) -> bool:
        """After prepare: wait until the child says HELD (its setup done); False when it
        exited first or ``timeout_s`` passed (then it cannot be used: close it)."""
        if not self._held:
            self._held = wait_ready(self.proc, timeout_s, HELD, self._seen)
        return self._held

    def go(self, spec: dict, timeout_s: float) -> Tuple[int, str, float, float]:
        """Write ``spec``, wait until the child is ready, let it run: (its exit status,
        its stderr, the seconds waited for it to be ready, the seconds it ran). The time
        limit ``timeout_s`` counts from its go; past it the child is ended, its files
        kept, and subprocess.TimeoutExpired raised."""
        with open(self.spec_path, "w") as f:
            json.dump(spec, f)
        t0 = time.perf_counter()
        if self.prepared is None:
            wait_ready(self.proc, seen=self._seen)
        elif not self._held:  # (run_mode waits for it first, to set up anew if it failed)
            self.wait_held(READY_TIMEOUT_S)
        t1 = time.perf_counter()
        try:
            _, stderr = self.proc.communicate("go\n", timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._end()
            raise
        return self.proc.returncode, stderr or "", t1 - t0, time.perf_counter() - t1

    def log_bytes(self) -> bytes:
        """What its log holds so far (bytes: the children's spans are byte offsets)."""
        if self.log_path is None or not os.path.exists(self.log_path):
            return b""
        with open(self.log_path, "rb") as f:
            return f.read()

    def _end(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def close(self) -> None:
        """End the process if it still runs (its turn never came, an error, Ctrl-C), close
        its pipes and remove its files. Closing again does nothing more."""
        self._end()
        for pipe in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                pipe.close()  # a no-op after go()'s communicate
            except OSError:  # stdin of a process that died: nothing to flush to
                pass
        self._tmp.cleanup()


def last_line(stderr: str) -> str:
    """A failed child's last words: the last non-blank line of its stderr."""
    tail = [ln for ln in stderr.strip().splitlines() if ln.strip()]
    return tail[-1] if tail else "no output"


def import_ahead(names) -> None:
    """Import ``names`` now, for a head start only: one that fails (any error) is left to
    whatever imports it later, which reports it there."""
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (see the docstring)
            pass


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    preload: list = []
    if argv[:1] == ["--preload"] and len(argv) >= 2:
        preload, argv = [n for n in argv[1].split(",") if n], argv[2:]
    if not argv:
        print("usage: python -m cudnn_explorer.measure.prestart [--preload NAME,...] "
              "MODULE ARG...", file=sys.stderr)
        return 2
    import_ahead(preload)  # the seconds this process is started ahead for
    print(READY, flush=True)  # the parent's time limit starts now
    if not sys.stdin.readline():
        return 0
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
