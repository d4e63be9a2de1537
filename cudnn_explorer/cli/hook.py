"""``hook install|remove|status``: the start-up hook's .pth file in this Python's
site-packages, for an install that did not put it there (Note [the start-up hook's
.pth] in setup.py)."""
from __future__ import annotations

import os
import sysconfig
from typing import List

from ..core.errors import UserError
from ..core.files import write_atomic
from ..core.zero_code import PTH_LINE
from .args import Parser

__all__ = ["build_parser", "run", "hook_path", "ACTIONS"]

ACTIONS = ("install", "remove", "status")
PTH = "cudnn_explorer_hook.pth"


def hook_path() -> str:
    """Where this Python reads the hook's .pth file from (its site-packages)."""
    return os.path.join(sysconfig.get_paths()["purelib"], PTH)


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer hook",
               description="The start-up hook that lets CUDNN_EXPLORER_RECORD and "
                           "CUDNN_EXPLORER_PLANS reach every Python process: " +
                           " | ".join(ACTIONS) + " its .pth file in this Python's "
                           "site-packages.")
    p.add("action", nargs="?", help=" | ".join(ACTIONS))
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def run(argv: List[str]) -> int:
    a, _ = build_parser().parse_given(argv, f"hook: give an action ({', '.join(ACTIONS)})")
    if a.action not in ACTIONS:
        raise UserError(f"hook action {a.action!r}: valid: {', '.join(ACTIONS)}")
    path = hook_path()
    try:
        if a.action == "install":
            write_atomic(path, PTH_LINE + "\n")
        elif a.action == "remove" and os.path.exists(path):
            os.unlink(path)
    except OSError as e:
        raise UserError(f"hook {a.action}: '{path}': {e.strerror}") from None
    if not os.path.exists(path):
        print(f"hook: not installed ({path} absent)")
        return 0 if a.action == "remove" else 1
    with open(path) as f:
        same = f.read().strip() == PTH_LINE
    print(f"hook: {'installed' if same else 'an older version is installed'}: {path}"
          + ("" if same else " (python -m cudnn_explorer hook install replaces it)"))
    return 0
