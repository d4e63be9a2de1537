"""Reading the user's files: one UserError that names the option and the file. Pure."""
from __future__ import annotations

__all__ = ["read_bytes", "read_text"]

from .errors import UserError


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
