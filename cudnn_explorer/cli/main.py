"""The entry point: the verb, its module imported only when it runs (so ``--help`` stays
fast), and exit codes.

Results go to stdout (tables, or --json / --csv); errors are one line on stderr with a
non-zero exit code (2: bad input or a problem cuDNN cannot run; 3: missing GPU, driver,
extension, package or memory; 1: anything unexpected; 130: interrupted). --debug shows tracebacks.
"""
from __future__ import annotations

import importlib
import os
import sys
from typing import List, Optional

from ..core.errors import ExplorerError

__all__ = ["main", "console", "VERBS"]

# verb -> its module under cudnn_explorer.cli; a command line without a verb explores one
# problem (the default verb)
VERBS = {"model": "model", "advise": "advise", "compare": "compare", "history": "history",
         "export": "export", "plot": "plot", "plans": "plans", "record": "record",
         "tune": "tune", "run": "run", "hook": "hook"}
DEFAULT = "explore"


def run(argv: List[str]) -> int:
    """The exit code of the command line ``argv`` (ExplorerError propagates)."""
    verb = VERBS.get(argv[0]) if argv else None
    module = importlib.import_module(f".{verb or DEFAULT}", __package__)
    return module.run(argv[1:] if verb else argv)


def _terminated(signum, frame):
    """SIGTERM (``timeout``, a job scheduler) ends a run as Ctrl-C does: what finished is
    shown and saved."""
    raise KeyboardInterrupt


def _missing_dependency(e: BaseException) -> str:
    """The line for a package this Python lacks (a user who ran the system ``python``
    instead of the environment setup.sh made), or "" for anything else: a module of this
    package that fails to import is an internal error."""
    if not isinstance(e, ModuleNotFoundError) or not e.name:
        return ""
    top = e.name.partition(".")[0]
    if top == __package__.partition(".")[0]:
        return ""
    return (f"this Python lacks '{top}': use .venv/bin/python "
            f"(scripts/setup.sh) or pip install {top}")


def main(argv: Optional[List[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # the tool's own --debug: not one of the command's after -- (record, run)
    ours = argv[:argv.index("--")] if "--" in argv else argv
    debug = "--debug" in ours or os.environ.get("CUDNN_EXPLORER_DEBUG", "").strip().lower() \
        not in ("", "0", "false", "no", "off")
    import signal
    import threading

    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _terminated)
    try:
        return run(argv)
    except ExplorerError as e:
        if debug:
            raise
        print(f"cudnn_explorer: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("cudnn_explorer: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # an internal error: still one line unless --debug
        if debug:
            raise
        missing = _missing_dependency(e)
        if missing:
            print(f"cudnn_explorer: error: {missing}", file=sys.stderr)
            return 3
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        if "out of memory" in first.lower():  # torch's OutOfMemoryError, a CUDA error
            print(f"cudnn_explorer: error: out of GPU memory: {first}", file=sys.stderr)
            return 3
        if isinstance(e, MemoryError) or "can't allocate memory" in first:  # torch's CPU allocator
            print(f"cudnn_explorer: error: out of host memory{': ' if first else ''}{first}",
                  file=sys.stderr)
            return 3
        print(f"cudnn_explorer: internal error: {type(e).__name__}: {first} "
              f"(rerun with --debug for the traceback)", file=sys.stderr)
        return 1
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def console() -> None:
    """The ``cudnn-explorer`` console script."""
    sys.exit(main())
