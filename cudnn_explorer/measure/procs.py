"""What every child process of ours shares: its environment, its command line (a JSON
spec and one output path), and its exit status in words."""
from __future__ import annotations

import json
import os
import signal
import sys
from typing import Optional

from ..core.files import write_atomic

__all__ = ["child_env", "describe_rc", "read_spec", "write_result", "log_size", "quick_exit"]

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(drop=()) -> dict:
    """The environment of a child of ours: this one, less ``drop``, with this package
    importable (PYTHONPATH starts with its parent directory)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = _PKG_PARENT + (os.pathsep + env["PYTHONPATH"]
                                       if env.get("PYTHONPATH") else "")
    return env


def describe_rc(rc: int) -> str:
    """A child's exit status in words ("exit code 1", "killed by SIGABRT")."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def read_spec(argv, usage: str) -> Optional[dict]:
    """A child's command line is SPEC.json and one output path: the spec, or None after
    printing the usage."""
    if len(argv) != 2:
        print(f"usage: {usage}", file=sys.stderr)
        return None
    with open(argv[0]) as f:
        return json.load(f)


def write_result(path: str, result) -> None:
    """A child's result as JSON, atomically: a temporary file, then a rename, so the
    parent never reads a half-written file."""
    write_atomic(path, json.dumps(result))


def log_size(path: Optional[str]) -> Optional[int]:
    """The byte size of a child's log so far (its spans are byte offsets): None without a
    log, 0 before the library has written it."""
    if not path:
        return None
    try:
        return os.path.getsize(path)
    except OSError:
        return 0


def quick_exit(code: int) -> None:
    """End this child now with ``code``, its output flushed. Note [quick exit]: its results
    are written and closed; the parent waits for this process to end, and an
    interpreter's teardown (torch's modules, the caching allocator, the cuDNN handle, the
    CUDA context) takes it a while. The driver frees the context of an ended process."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
