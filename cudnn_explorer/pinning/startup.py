"""The start-up hook: the one line of ``cudnn_explorer_hook.pth`` calls :func:`install`
when CUDNN_EXPLORER_RECORD or CUDNN_EXPLORER_PLANS is set, in every Python process
(torchrun's ranks, subprocesses, spawned workers). It imports no torch: once the program
imports torch, pinning/zero_code.py switches pinned routing on for the process.

Note [hook never breaks the program]: a bad variable value is said in one line on stderr
and the program runs as it would without the hook (exit 2 is for the record and run
verbs, which check the variables before they start anything); a plan file that cannot be
used is said in one line and the program runs unpinned, unless CUDNN_EXPLORER_STRICT=1,
which ends it with exit status 2.
"""
from __future__ import annotations

import os
import sys

__all__ = ["install"]


def _say(text: str) -> None:
    print(f"cudnn_explorer: {text}", file=sys.stderr, flush=True)


class _TorchFinder:
    """A sys.meta_path finder that lets the real finders find ``torch`` and runs
    ``then`` once its module has run (so the program's ``import torch`` returns with
    routing on)."""

    def __init__(self, then):
        self.then = then

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        sys.meta_path.remove(self)  # once, and not for the lookup below
        import importlib.util

        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        run, then = loader.exec_module, self.then

        def exec_module(module):
            run(module)
            then()
        try:
            loader.exec_module = exec_module  # this spec's loader object only
        except AttributeError:
            return spec
        return spec


def the_tools_own() -> bool:
    """Note [the tool's own processes]: whether this process is cudnn_explorer's own (its
    command line, a verb's process, its workers and PyTorch's children, all run as ``-m
    cudnn_explorer...``; the ``cudnn-explorer`` script), which the hook leaves alone: a
    plan file or a recording exported in the shell is for the user's program, and
    pinning the tool's own children would change what they measure of PyTorch."""
    from ..core.zero_code import python_command

    def ours(name: str) -> bool:
        return name == "cudnn_explorer" or name.startswith("cudnn_explorer.")

    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    if ours(getattr(spec, "name", "") or ""):
        return True
    # the interpreter's own command line (3.10+), right from start-up, where __main__'s
    # spec is not yet set while -m's parent packages import
    _, kind, what = python_command((getattr(sys, "orig_argv", None) or [""])[1:])
    if kind == "m" and ours(what):
        return True
    return os.path.basename((getattr(sys, "argv", None) or [""])[0] or "") == "cudnn-explorer"


_INSTALLED: list = []  # install() ran in this process (with the process's variables)


def install(environ=None) -> None:
    """Read the variables; where they ask for recording or pinning, switch it on once
    torch is imported (now, where it is imported already). Never raises for a bad value
    (Note [hook never breaks the program]). Once per process: an installed .pth and
    another site directory holding one (a test's, a virtual environment's) both call it."""
    if environ is None:
        if _INSTALLED:
            return
        _INSTALLED.append(True)
    env = os.environ if environ is None else environ
    try:
        from ..core.errors import UserError
        from ..core.zero_code import settings_from

        settings = settings_from(env)
    except UserError as e:
        _say(f"{e}; the program runs without cudnn_explorer")
        return
    if not settings.mode:
        return

    def switch_on():
        try:
            if the_tools_own():
                return
            from .zero_code import activate

            activate(settings)
        except Exception as e:  # noqa: BLE001  (Note [hook never breaks the program])
            _say(f"internal error: {type(e).__name__}: {e}; the program runs without "
                 f"cudnn_explorer")
    if "torch" in sys.modules:
        switch_on()
    else:
        sys.meta_path.insert(0, _TorchFinder(switch_on))
