"""Plans built ahead of their first call, and kept between processes.

Pinning loads a plan file; the op builds each plan (and compiles a run-time compiled
engine) on its first call unless it was built ahead. :func:`start` builds every plan of
the file on threads of its own while the process goes on (Note [plans built ahead] in
csrc/pinned_plans.cpp), restoring those kept beside the file (pinning/kept.py), and
once they are built writes the kept plans again where something new was built.
"""
from __future__ import annotations

import atexit
import os
import threading
import warnings
from typing import Optional, Union

from ..core.errors import UserError
from . import kept, op

__all__ = ["start", "wait_for_plans", "threads_of", "kept_file_of"]

_EXIT_HOOK = []
_WRITERS: list = []  # the threads writing kept plans back


def threads_of(ahead: Union[bool, int]) -> int:
    """Builder threads for pin()'s ``ahead``: True, up to 8 (one per core); False, none;
    an integer, that many (1 to 64)."""
    if ahead is True:
        return max(1, min(8, os.cpu_count() or 1))
    if ahead is False or ahead is None:
        return 0
    if isinstance(ahead, int) and 1 <= ahead <= 64:
        return ahead
    raise UserError(f"ahead {ahead!r}: valid: True, False or a thread count from 1 to 64")


def kept_file_of(keep: Union[bool, str, os.PathLike], source: Optional[str]) -> Optional[str]:
    """The kept plans' path for pin()'s ``keep``: True, beside the plan file where it was
    given as a path (none for a PlanFile); False, none; a path, that path (not the plan
    file, not a folder)."""
    if keep is True:
        return kept.kept_path(source) if source else None
    if keep is False or keep is None:
        return None
    if isinstance(keep, os.PathLike):
        keep = os.fspath(keep)
    if not isinstance(keep, str) or not keep:
        raise UserError(f"keep {keep!r}: valid: True, False or a file's path")
    if os.path.isdir(keep):
        raise UserError(f"keep '{keep}': is a folder; valid: True, False or a file's path")
    if source and os.path.exists(keep) and os.path.exists(source) and \
            os.path.samefile(keep, source):
        raise UserError(f"keep '{keep}': is the plan file; writing the kept plans there would "
                        f"lose it: give another path (True keeps them in "
                        f"'{kept.kept_path(source)}')")
    return keep


def _wait_at_exit() -> None:
    """Builders still running when the interpreter exits would call cuDNN while the CUDA
    context goes away, and a short process would exit before its kept plans are written:
    wait for both."""
    try:
        wait_for_plans()
    except Exception:  # noqa: BLE001  (exiting: nothing more to say)
        pass


def _write_back(path: str, env: dict, had: set, keys: frozenset) -> None:
    """Once the builds are done, write the kept plans of the file whose keys are ``keys``
    where they differ from what was read (``had``: (key, tag, form) of each). Plans of
    another file (pinned since) are left out, and nothing is written where none is left."""
    op.wait_ahead()
    now = [p for p in op.kept_plans() if tuple(p[0]) in keys]
    if not now or {(tuple(k), t, f) for k, t, f, _ in now} <= had:
        return
    what = kept.foreign(path)
    if what:
        warnings.warn(f"cudnn_explorer: kept plans not written: '{path}' is {what}, not kept "
                      f"plans, and is left as it is (keep= another path keeps them)",
                      stacklevel=1)
        return
    try:
        kept.write_kept(path, env, now)
    except OSError as e:
        warnings.warn(f"cudnn_explorer: kept plans '{path}' not written ({e.strerror}); "
                      f"the next process builds its plans again", stacklevel=1)


def start(device: int, threads: int, kept_file: Optional[str]) -> None:
    """Build the loaded file's plans for ``device`` on ``threads`` threads, restoring
    those kept in ``kept_file`` (None: none); returns at once. A kept file that cannot
    be used is said in one warning and the plans are built; it is written again, in the
    background, once they are."""
    if threads <= 0:
        return
    if not _EXIT_HOOK:
        atexit.register(_wait_at_exit)
        _EXIT_HOOK.append(True)
    env = kept.environment(device) if kept_file else {}
    forms, note = kept.read_kept(kept_file, env) if kept_file else ([], None)
    if note:
        warnings.warn(f"cudnn_explorer: {note}", stacklevel=3)
    op.build_ahead(device, threads, forms)
    if kept_file:
        had = {(tuple(k), t, f) for k, t, f in forms}
        writer = threading.Thread(target=_write_back,
                                  args=(kept_file, env, had, op.loaded_keys()),
                                  name="cudnn_explorer kept plans", daemon=True)
        writer.start()
        _WRITERS.append(writer)


def wait_for_plans() -> int:
    """Wait until the plans being built ahead are built and the kept plans written;
    returns how many plans the last start() began building."""
    n = op.wait_ahead()
    while _WRITERS:
        _WRITERS.pop().join()
    return n
