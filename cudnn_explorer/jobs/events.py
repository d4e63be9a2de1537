"""Where a job's messages go: progress lines, and notes and warnings that are not errors.

``notify(kind, text)``: kind "info" (what the job did: answered from the store), "note"
(something the user should know: engine configs skipped), "warning" (something did not
work and the job went on: a store that cannot be written) or "error" (a part failed and
the job goes on with the rest: a rank's share). The default sends them to the
``cudnn_explorer`` logger (info, info, warning, error), so a notebook shows the last two.
"""
from __future__ import annotations

import logging
from typing import Callable, Optional

from ..core.errors import UserError
from ..core.problem import told

__all__ = ["Notify", "notifier", "quiet_progress", "check_callbacks"]

Notify = Callable[[str, str], None]
_LOG = logging.getLogger("cudnn_explorer")


def _log(kind: str, text: str) -> None:
    _LOG.log({"warning": logging.WARNING, "error": logging.ERROR}.get(kind, logging.INFO), text)


def notifier(notify: Optional[Notify]) -> Notify:
    """``notify``, or the logger's."""
    return notify or _log


def check_callbacks(**given) -> None:
    """UserError naming the first of ``given`` (a job's progress, notify, save... by
    keyword) that is neither None nor callable: said before the work, not once it ran."""
    for name, fn in given.items():
        if fn is not None and not callable(fn):
            raise UserError(f"{name} {told(fn)}: give a function, or None")


def quiet_progress(progress: Optional[Callable[[str], None]]) -> Callable[[str], None]:
    """``progress``, or one that says nothing."""
    return progress or (lambda msg: None)
