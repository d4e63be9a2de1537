"""Exceptions with the exit codes the CLI maps them to. Pure Python."""

__all__ = ["ExplorerError", "UserError", "MissingDependencyError", "CudnnError", "ResourceError",
           "GpuMemoryError", "GpuError", "ChildError", "Interrupted", "first_line", "described"]


class ExplorerError(Exception):
    """Base class: a one-line, user-facing message. ``partial``: what finished before the
    error, where the code that raised it kept it (an engine search's EngineSpace of the
    configs tried before its worker died: measure/engine_worker.py); None otherwise."""

    exit_code = 1
    partial = None


class UserError(ExplorerError, ValueError):
    """Bad input: names the bad value and what would be valid. Exit code 2."""

    exit_code = 2


class MissingDependencyError(ExplorerError, RuntimeError):
    """No GPU, no driver, or the extension not built: says what to do. Exit code 3."""

    exit_code = 3


class CudnnError(ExplorerError, RuntimeError):
    """cuDNN refused a call. ``status`` is cuDNN's name for it, e.g.
    ``CUDNN_STATUS_NOT_SUPPORTED``. Exit code 2 (the problem cannot run)."""

    exit_code = 2

    def __init__(self, message: str, status: str = "CUDNN_STATUS_UNKNOWN"):
        super().__init__(message)
        self.status = status


class ResourceError(ExplorerError, RuntimeError):
    """The GPU ran out of memory or another resource. Exit code 3."""

    exit_code = 3


class GpuMemoryError(ResourceError):
    """The GPU ran out of memory ("out of GPU memory ..."). Exit code 3."""


class GpuError(ExplorerError, RuntimeError):
    """The GPU or its driver failed a call (a CUDA error other than out-of-memory). Exit
    code 3: a fault of the machine, not of the input."""

    exit_code = 3


class ChildError(ExplorerError, RuntimeError):
    """A child process of ours (PyTorch's own call in one mode, an engine-config worker)
    crashed, hung or wrote no result. Exit code 3: the machine, not the input."""

    exit_code = 3


def first_line(e: BaseException, limit: int = 300) -> str:
    """The first line of a foreign exception's message (PyTorch's can run to pages), at
    most ``limit`` characters; "" when it has none."""
    text = str(e).strip()
    return text.splitlines()[0][:limit] if text else ""


def described(e: BaseException, limit: int = 300) -> str:
    """"Type: first line" of a foreign exception, or "Type" when it has no message."""
    line = first_line(e, limit)
    return f"{type(e).__name__}: {line}" if line else type(e).__name__


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM, which the command line turns into it) during a measurement:
    ``partial`` holds what finished before it (an Exploration with ``complete`` False),
    for the caller to show and save."""

    def __init__(self, partial=None):
        super().__init__("interrupted")
        self.partial = partial
