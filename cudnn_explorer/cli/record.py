"""``record -o convs.json [--steps N | --time-limit S] -- COMMAND``: run a program
unchanged and record every convolution its processes ran (docs/zero-code.md)."""
from __future__ import annotations

import os
import sys
from typing import List, Optional, Sequence, Tuple

from ..core.errors import ExplorerError, UserError
from ..core.options import parse_int
from .args import Parser
from .output import check_output_path, notify, same_file, say, write_output

__all__ = ["build_parser", "run", "split_command", "refuse_command_files"]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer record",
               description="Run COMMAND unchanged (after --) and record every convolution "
                           "its Python processes run (every rank, every subprocess): each "
                           "problem-direction as PyTorch keys it, its calls and its sizes.")
    p.add("-o", "--out", default=None, metavar="PATH", help="the record file to write")
    p.add("--steps", default=None, metavar="N",
          help="stop each process after N optimizer steps (most scripts repeat themselves)")
    p.add("--time-limit", default=None, metavar="S",
          help="stop the command after S seconds (SIGTERM to all of its processes)")
    p.add("--force", action="store_true", help="replace an existing record file")
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def split_command(argv: List[str], verb: str) -> Tuple[List[str], List[str]]:
    """(the verb's options, the command after ``--``); UserError without a command, but
    for -h or --help, which the parser then answers."""
    if "--" not in argv:
        if "-h" in argv or "--help" in argv:
            return argv, []
        raise UserError(f"{verb}: give the command after --, e.g. {verb} ... -- python "
                        f"train.py ARGS")
    i = argv.index("--")
    return argv[:i], argv[i + 1:]


def refuse_command_files(path: Optional[str], flag: str, command: Sequence[str]) -> None:
    """UserError when output ``path`` is a file ``command`` names (an argument, or the
    value of --opt=VALUE): the verb's output must not overwrite the script or its data."""
    if path in (None, "", "-"):
        return
    for arg in command:
        for named in (arg, arg.partition("=")[2]):
            if named and os.path.isfile(named) and same_file(path, named):
                raise UserError(f"{flag} '{path}': is a file the command after -- names "
                                f"('{arg}'); writing it would lose it: give another {flag}")


def _seconds(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = -1.0
    if not v > 0 or v == float("inf"):
        raise UserError(f"--time-limit '{text}': valid: a number of seconds > 0")
    return v


def render(record) -> str:
    """The record in a few lines: totals, then the problem-directions with most calls."""
    lines = [f"recorded {len(record.convs)} problem-directions, {record.calls:,} convolution "
             f"calls in {record.processes} process{'es' if record.processes != 1 else ''}"
             + (f" ({record.steps} optimizer steps)" if record.steps else "")]
    for c in record.convs[:10]:
        lines.append(f"  {c.calls:>9,}  {c.description[:104]}")
    if len(record.convs) > 10:
        lines.append(f"  ... and {len(record.convs) - 10} more")
    for u in record.unkeyed:
        lines.append(f"  {u.calls:>9,}  not recordable: {u.reason[:90]}")
    return "\n".join(lines) + "\n"


def run(argv: List[str]) -> int:
    options, command = split_command(argv, "record")
    a, _ = build_parser().parse(options)
    if not a.out:
        raise UserError("record: give -o FILE, the record file to write")
    if a.steps is not None and a.time_limit is not None:
        raise UserError("--steps and --time-limit: give one of them")
    steps = parse_int(a.steps, "--steps", 1) if a.steps is not None else 0
    limit = _seconds(a.time_limit) if a.time_limit is not None else None
    check_output_path(a.out, "--out")
    refuse_command_files(a.out, "--out", command)
    if os.path.exists(a.out) and not a.force:
        raise UserError(f"--out '{a.out}': exists; --force replaces it")
    from ..jobs.zero_code import record

    try:
        result = record(command, steps=steps, time_limit=limit, notify=notify)
    except KeyboardInterrupt as e:
        partial = getattr(e, "partial", None)
        if partial is not None and partial.processes:
            write_output(partial.to_json(), a.out, "--out")
            say(f"interrupted: wrote what finished ({len(partial.convs)} problem-directions)")
        else:
            say(f"interrupted before any process recorded: '{a.out}' not written")
        return 130
    except ExplorerError:
        raise
    if not result.record.processes:  # an empty record would only replace or mislead
        if result.stopped:
            say(f"stopped the command after {limit:g} s (--time-limit) before any process "
                f"recorded: '{a.out}' not written")
            return 2
        if result.status:
            say(f"the command exited {result.status} before any process recorded: "
                f"'{a.out}' not written")
            return result.status
        say(f"no Python process of the command imported torch under the start-up hook: "
            f"'{a.out}' not written (python -m cudnn_explorer hook status)")
        return 2
    sys.stderr.write(render(result.record))
    write_output(result.record.to_json(), a.out, "--out")
    if result.stopped:
        say(f"stopped the command after {limit:g} s (--time-limit)")
        return 0
    if result.status:
        say(f"the command exited {result.status}; the record holds what ran before")
    return result.status
