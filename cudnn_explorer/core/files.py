"""Reading the user's files (one UserError that names the option and the file), writing
files atomically, and where the tool keeps its own files. Pure."""
from __future__ import annotations

import gzip
import os
import stat
import tempfile
import zlib

__all__ = ["read_bytes", "read_text", "write_atomic", "cache_home", "GZIP_MAGIC"]

from .errors import UserError


def cache_home() -> str:
    """The folder of the tool's own files: $XDG_CACHE_HOME/cudnn_explorer, by default
    ~/.cache/cudnn_explorer (the results store, the environments seen)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cudnn_explorer")


GZIP_MAGIC = b"\x1f\x8b"
# A gzip file whose content would be larger than this is refused (a saved sweep of a large
# model is tens of MB; a "zip bomb" must not fill the memory).
MAX_UNZIPPED = 1 << 30


def read_bytes(path: str, what: str) -> bytes:
    """The bytes of ``path``, decompressed when it is a gzip file (a saved result written
    to NAME.gz); UserError "<what> '<path>': <why>" when it cannot be read."""
    if not isinstance(path, (str, os.PathLike)):  # an int would be read as a descriptor
        raise UserError(f"{what} {type(path).__name__}: give a file's path")
    name = os.fspath(path)
    if ("\0" if isinstance(name, str) else b"\0") in name:
        raise UserError(f"{what} {name!r}: not a path (a NUL character)")
    try:
        mode = os.stat(path).st_mode
        pipe = stat.S_ISFIFO(mode)
        if pipe:  # <(zcat x.json.gz); one with no writer: no wait, and said so below
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.set_blocking(fd, True)
            f = os.fdopen(fd, "rb")
        elif stat.S_ISREG(mode) or stat.S_ISDIR(mode):
            f = open(path, "rb")
            if stat.S_ISREG(mode) and os.fstat(f.fileno()).st_size > MAX_UNZIPPED:
                f.close()
                raise UserError(f"{what} '{path}': more than {MAX_UNZIPPED >> 20} MiB")
        else:  # a device (/dev/zero) would never end the read
            raise UserError(f"{what} '{path}': not a regular file")
        with f:
            chunks, size = [], 0
            while size <= MAX_UNZIPPED:  # in pieces: no buffer of the cap's size up front
                chunk = f.read(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            data = b"".join(chunks)
    except OSError as e:
        raise UserError(f"{what} '{path}': {e.strerror}") from None
    if len(data) > MAX_UNZIPPED:
        raise UserError(f"{what} '{path}': more than {MAX_UNZIPPED >> 20} MiB")
    if pipe and not data:
        raise UserError(f"{what} '{path}': a named pipe that nothing wrote to")
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        d = zlib.decompressobj(wbits=31)  # gzip framing; one member, as gzip writes
        out = d.decompress(data, MAX_UNZIPPED)
        if d.unconsumed_tail:
            raise UserError(f"{what} '{path}': more than {MAX_UNZIPPED >> 20} MiB once "
                            f"decompressed")
        if not d.eof:
            raise zlib.error("truncated")
        return out
    except zlib.error as e:
        raise UserError(f"{what} '{path}': not a valid gzip file ({e})") from None


def read_text(path: str, what: str) -> str:
    """read_bytes decoded as UTF-8, a leading byte-order mark (an editor's) left out;
    UserError when it is not text."""
    try:
        return read_bytes(path, what).decode("utf-8-sig")
    except UnicodeDecodeError:
        raise UserError(f"{what} '{path}': not a text file") from None


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: set it straight back
    os.umask(mask)
    return mask


def write_atomic(path: str, data, compress: bool = False) -> None:
    """``data`` (bytes or text, UTF-8) into ``path`` atomically: a temporary file in the
    same directory, then a rename, so a reader never sees half a file, and a file that
    was there stays whole when writing fails. The file gets the mode a plain ``open``
    would give it (0666 less the user's umask), not the temporary file's 0600. With
    ``compress``, gzip (mtime 0: the same content gives the same bytes). OSError when the
    directory cannot take it; nothing is left behind."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if compress:
        data = gzip.compress(data, compresslevel=9, mtime=0)
    where = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".cudnn_explorer.", dir=where)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
