"""Reading the user's files: one UserError that names the option and the file; where the
tool keeps its own files. Pure."""
from __future__ import annotations

import os

__all__ = ["read_bytes", "read_text", "cache_home"]

from .errors import UserError


def cache_home() -> str:
    """The folder of the tool's own files: $XDG_CACHE_HOME/cudnn_explorer, by default
    ~/.cache/cudnn_explorer (the results store, the environments seen)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudnn_explorer")


def read_bytes(path: str, what: str) -> bytes:
    """The bytes of ``path``; UserError "<what> '<path>': <why>" when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise UserError(f"{what} '{path}': {e.strerror}") from None


def read_text(path: str, what: str) -> str:
    """read_bytes decoded as UTF-8; UserError when it is not text."""
    try:
        return read_bytes(path, what).decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{what} '{path}': not a text file") from None
