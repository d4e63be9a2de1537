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
same way (Note [model children started ahead] in model/pytorch_run.py).
"""
from __future__ import annotations

import importlib
import runpy
import select
import sys
import time

__all__ = ["main", "READY", "READY_TIMEOUT_S", "wait_ready"]
READY = "cudnn_explorer: ready"
READY_TIMEOUT_S = 120.0  # importing torch on a busy host


def wait_ready(proc, timeout_s=None) -> None:
    """In the parent: wait until a child started ahead (a subprocess.Popen with text
    pipes) says it is ready, or exits, or ``timeout_s`` (default READY_TIMEOUT_S) passes:
    then its own time limit covers the rest."""
    deadline = time.monotonic() + (READY_TIMEOUT_S if timeout_s is None else timeout_s)
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], max(deadline - time.monotonic(), 0))
        if not ready:
            return
        line = proc.stdout.readline()
        if not line or line.strip() == READY:
            return


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    preload: list = []
    if argv[:1] == ["--preload"] and len(argv) >= 2:
        preload, argv = [n for n in argv[1].split(",") if n], argv[2:]
    if not argv:
        print("usage: python -m cudnn_explorer.measure.prestart [--preload NAME,...] "
              "MODULE ARG...", file=sys.stderr)
        return 2
    for name in preload:  # the seconds this process is started ahead for
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # the module reports it
    print(READY, flush=True)  # the parent's time limit starts now
    if not sys.stdin.readline():
        return 0
    sys.argv = list(argv)
    runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
