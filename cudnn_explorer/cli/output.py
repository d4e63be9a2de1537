"""Where a verb's output goes: files written atomically (checked before anything is
measured), the notes and warnings of a job as one line each on stderr, and progress."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import textwrap
import time
from typing import Callable, List, Optional, Sequence, Tuple

from ..core.errors import UserError
from ..core.files import write_atomic
from ..report.format import WIDTH

__all__ = ["check_output_path", "same_file", "distinct_outputs", "one_stdout", "write_output", "say", "notify",
           "progress_lines", "plot_paths", "error", "process_age_s"]


def check_output_path(path: Optional[str], flag: str,
                      reads: Sequence[Tuple[Optional[str], str]] = ()) -> None:
    """UserError, before anything is measured, when ``path`` cannot be written, or when it
    is a file the same command reads: ``reads``, (path, how the command names it) pairs,
    e.g. ``(a.file, "the saved sweep")`` (a None path is skipped)."""
    if path in (None, "-"):
        return
    if not path:
        raise UserError(f"{flag} '': give a file's path")
    if path.endswith(os.sep) or (os.altsep and path.endswith(os.altsep)):
        raise UserError(f"{flag} '{path}': names a folder (it ends in {path[-1]}); give a "
                        f"file's path")
    for read, what in reads:
        if read not in (None, "-") and same_file(path, read):
            raise UserError(f"{flag} '{path}': is {what} this command reads; writing it "
                            f"would lose it: give another {flag}")
    where = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise UserError(f"{flag} '{path}': is a directory")
    if not os.path.isdir(where):
        raise UserError(f"{flag} '{path}': directory '{where}' does not exist")
    if os.path.exists(path) and not os.path.isfile(path):
        raise UserError(f"{flag} '{path}': not a regular file")
    name, longest = os.path.basename(path), _longest_name(where)
    if len(os.fsencode(name)) > longest:
        raise UserError(f"{flag} '{name[:24]}...': a file name of {len(os.fsencode(name))} "
                        f"bytes; valid: at most {longest} there")
    try:  # the very way write_output writes: a temporary file beside it
        fd, tmp = tempfile.mkstemp(prefix=".cudnn_explorer.", dir=where)
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise UserError(f"{flag} '{path}': cannot write there: {e.strerror}") from None


def _longest_name(folder: str) -> int:
    """The longest file name, in bytes, that ``folder``'s file system takes (255 where it
    does not say)."""
    try:
        longest = os.pathconf(folder, "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        longest = 0
    return longest if longest > 0 else 255


def same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` name one file (links and relative paths resolved;
    two paths of which one does not exist yet compare as resolved paths)."""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
        return os.path.realpath(a) == os.path.realpath(b)
    except (OSError, ValueError):
        return False


def distinct_outputs(outputs: Sequence[Tuple[Optional[str], str]]) -> None:
    """UserError when two of a command's ``outputs`` ((path, flag) pairs) name one file:
    the second written would lose the first."""
    named = [(p, f) for p, f in outputs if p not in (None, "-")]
    for k, (p, f) in enumerate(named):
        for q, g in named[k + 1:]:
            if same_file(p, q):
                raise UserError(f"{f} '{p}' and {g} '{q}': one file for two outputs, one "
                                f"would be lost; give each its own")


def one_stdout(outputs: Sequence[Tuple[Optional[str], str]]) -> bool:
    """Whether stdout is free for the table: no output of ``outputs`` ((path, flag)
    pairs) is "-". Where "-" means stdout, stdout carries that file alone: UserError when
    two outputs ask for it."""
    on_stdout = [flag for path, flag in outputs if path == "-"]
    if len(on_stdout) > 1:
        raise UserError(f"{' and '.join(f'{f} -' for f in on_stdout)} all write to stdout, "
                        f"which would parse as neither; give one of them a file")
    return not on_stdout


def write_output(text: str, path: Optional[str], flag: str, quiet: bool = False) -> None:
    """``text`` to stdout ("-" or None) or to ``path`` atomically (core.files.write_atomic;
    a path ending in .gz is written gzip-compressed: every reader of saved files takes
    either)."""
    if path in (None, "-"):
        sys.stdout.write(text)
        return
    try:
        write_atomic(path, text, compress=path.endswith(".gz"))
    except OSError as e:
        raise UserError(f"{flag} '{path}': cannot write: {e.strerror}") from None
    if not quiet:
        print(f"wrote {path}", file=sys.stderr)


def say(text: str) -> None:
    """One line of the tool's on stderr."""
    print(f"cudnn_explorer: {text}", file=sys.stderr, flush=True)


def error(text: str) -> None:
    say(f"error: {text}")


def notify(kind: str, text: str) -> None:
    """A job's notify: "cudnn_explorer: [KIND: ]TEXT" on stderr (info has no kind)."""
    say(text if kind == "info" else f"{kind}: {text}")


def progress_lines(verbose: bool, quiet: bool):
    """(progress, done) for explore's progress: plain timed lines with ``verbose``, one
    line overwritten in place on a terminal, else none; ``done()`` clears the line."""
    t_start = time.perf_counter()

    def plain(msg):  # wrapped at 120 columns, the continuation under the message
        line = f"cudnn_explorer: [{time.perf_counter() - t_start:6.1f} s] {msg}"
        print("\n".join(textwrap.wrap(line, WIDTH, subsequent_indent=" " * 27,
                                       break_on_hyphens=False)) or line,
              file=sys.stderr, flush=True)

    def overwrite(msg):  # one terminal line: cut to its width, or \r cannot clear it
        cols = min(WIDTH, shutil.get_terminal_size((WIDTH, 24)).columns) - 1
        sys.stderr.write(f"\r\033[K{msg if len(msg) <= cols else msg[:cols - 1] + '~'}")
        sys.stderr.flush()

    progress: Optional[Callable[[str], None]] = plain if verbose else (
        overwrite if not quiet and sys.stderr.isatty() else None)

    def done():
        if progress is overwrite:
            sys.stderr.write("\r\033[K")
    return progress, done


def plot_paths(out: str, flag: str,
               reads: Sequence[Tuple[Optional[str], str]] = ()) -> List[str]:
    """The files a plot at ``out`` writes (PATH.png, PATH.svg and the data, PATH.json),
    each checked as writable and as none of the files the command ``reads``
    (check_output_path)."""
    base = os.path.splitext(out)[0] if out.lower().endswith((".png", ".svg")) else out
    paths = [base + ".png", base + ".svg", base + ".json"]
    for path in paths:
        check_output_path(path, flag, reads)
    return paths


def process_age_s() -> Optional[float]:
    """Seconds since this process started (the interpreter's start, before any import),
    from /proc (clock-tick resolution); None where /proc does not say."""
    try:
        with open("/proc/self/stat") as f:
            stat = f.read()
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        # the fields after the command's name, which is in parentheses and may hold spaces
        started = int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None
    return max(0.0, uptime - started)
