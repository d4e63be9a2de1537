"""``tune convs.json -o plans.json [--add]``: explore every problem-direction a record
(or a misses file) holds, through the results store, and write one plan file of them
(docs/zero-code.md)."""
from __future__ import annotations

import os
import sys
from typing import List

from ..core.errors import UserError
from ..core.options import ExploreOptions, parse_int, profile_name
from ..core.plans import POLICIES
from .args import Parser, Refuse, check_rules
from .groups import TORCHRUN_DEVICE, add_store_args, store_choice, store_read
from .output import check_output_path, notify, progress_lines, say, write_output

__all__ = ["build_parser", "run", "RULES"]

RULES = [
    Refuse("--add", ("--force",), "--add keeps the plan file's entries"),
    Refuse("--add", ("--policy", "--max-workspace", "--deterministic"), "",
           text="{bad} would be ignored: --add keeps the plan file's own policy and "
                "filters; drop {bad}"),
    Refuse("--no-store", ("--store", "--refresh"), "--no-store uses no store"),
    Refuse("--quiet", ("--verbose",), "--quiet turns progress off"),
]
UNDER_TORCHRUN = [TORCHRUN_DEVICE]  # --no-store: the job's own line (stores.py)


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer tune",
               description="Explore every problem-direction of a record (record -o FILE) or "
                           "a misses file with the staged search, through the results store "
                           "(what it holds is not measured again; each direction is kept as "
                           "it finishes), and write one plan file for run --plans.")
    p.add("record", nargs="?", help="the record file (or a misses file, PLANS.misses)")
    p.add("-o", "--out", default=None, metavar="PATH", help="the plan file to write")
    p.add("--add", action="store_true",
          help="-o is an existing plan file: tune only what it lacks, and write it with its "
               "entries unchanged plus the new ones (same environment, policy and filters)")
    p.add("--force", action="store_true", help="replace an existing -o file")
    p.add("--policy", default=None,
          help="best (default: the fastest re-timed config PyTorch's rules allow) | pytorch "
               "(benchmark mode's own pick, frozen: runs PyTorch's children)")
    p.add("--max-workspace", default=None, metavar="MiB",
          help="only configs whose workspace is at most this many MiB (a filter of the "
               "plans: the exploration is not capped, so the store's results serve any cap)")
    p.add("--deterministic", action="store_true",
          help="only deterministic configs; the plans are keyed for deterministic mode")
    p.add("--profile", default="quick",
          help="quick (default: the model sweep's staged search) | thorough (every config "
               "timed with the full budget)")
    p.add("--device", default="0", help="CUDA device index (default 0)")
    add_store_args(p.group("results store (SQLite; shared with the other commands)"),
                   "the store file (default ~/.cache/cudnn_explorer/results.db)",
                   "neither read nor save results (an interrupted run starts over)",
                   "measure again even where the store has the answer (and save it)")
    p.add("--quiet", action="store_true", help="no progress lines on stderr")
    p.add("--verbose", action="store_true",
          help="progress as plain lines on stderr, also when it is not a terminal")
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def _checked(a) -> ExploreOptions:
    """The exploration's options (errors name the flag), after the files are checked."""
    if not a.record:
        raise UserError("tune: give the record file (record -o FILE wrote it)")
    if not a.out:
        raise UserError("tune: give -o FILE, the plan file to write")
    if a.policy is not None and a.policy not in POLICIES:
        raise UserError(f"--policy '{a.policy}': valid: {', '.join(POLICIES)}")
    profile_name(a.profile)
    if a.add:
        if a.out == "-" or not os.path.isfile(a.out):
            raise UserError(f"--add: -o '{a.out}' is no plan file to add to; valid: an "
                            f"existing plan file (without --add, tune writes a new one)")
    elif a.out != "-" and os.path.exists(a.out) and not a.force:
        raise UserError(f"--out '{a.out}': exists; --add adds to it, --force replaces it")
    check_output_path(a.out, "--out", [(a.record, "the record")]
                      + store_read(a.store, not a.no_store))
    device = parse_int(a.device, "--device", 0, 1023)
    cap = None if a.max_workspace is None else ExploreOptions.create(
        source="cli", max_workspace_mib=a.max_workspace).max_workspace_mib
    a.max_workspace = cap
    return ExploreOptions.create(source="cli", device=device,
                                 pytorch=(a.policy or "best") == "pytorch")


def render(result, out: str) -> str:
    """What tune did, in a few lines (stderr): totals, then what has no plan and why."""
    p = result.plans
    lines = [f"tuned {result.directions} problem-direction"
             f"{'s' if result.directions != 1 else ''} of {len(result.problems)} problem"
             f"{'s' if len(result.problems) != 1 else ''}: {result.measured} measured, "
             f"{result.answered} answered from the results store ({result.wall_s:.1f} s)",
             f"{out}: {len(p.entries)} plans, policy {p.policy}"
             + (f", {result.kept} kept and {len(p.entries) - result.kept} added"
                if result.kept else "")]
    for why in (result.failed + result.unusable + p.skipped)[:10]:
        lines.append(f"  no plan: {why[:108]}")
    return "\n".join(lines) + "\n"


def run(argv: List[str]) -> int:
    a, flags = build_parser().parse_given(argv, "tune: give the record file and -o FILE")
    check_rules(RULES, flags)
    options = _checked(a)
    from ..jobs.tune import tune, tune_rank
    from ..model import distributed

    world = distributed.world_from_env()
    if world is not None:
        check_rules(UNDER_TORCHRUN, ["TORCHRUN"] + flags)
    progress, done = progress_lines(a.verbose, a.quiet)
    kw = dict(policy=a.policy, max_workspace_mib=a.max_workspace,
              deterministic=a.deterministic or None, profile=a.profile,
              store=store_choice(a), add=a.out if a.add else None, notify=notify,
              progress=progress if world is None or progress is None else
              (lambda m: progress(f"[rank {world.rank}] {m}")))
    try:
        if world is None:
            result = tune(a.record, options, **kw)
        else:  # Note [tune spread over ranks]
            result, trouble = tune_rank(a.record, world, options, **kw)
            if trouble:
                done()
                say(trouble if trouble.startswith("rank ") else f"[rank {world.rank}] {trouble}")
            if world.rank != 0:
                # exit 0 even where the share failed: torchrun would stop rank 0, which
                # measures what this rank could not, then writes the file and says
                done()
                say(f"[rank {world.rank}] tuned {result.done if result else 0} problem(s) of "
                    f"its share into the results store ({len(result.failed) if result else 0}"
                    f" failed; rank 0 measures those); rank 0 writes '{a.out}'")
                return 0
    except KeyboardInterrupt as e:
        done()  # the progress line cleared before the last word
        if world is None or world.rank == 0:  # one rank writes what finished
            _interrupted(a, getattr(e, "partial", None))
        return 130
    finally:
        done()
    if not result.problems:
        say(f"nothing to add: '{a.out}' covers every problem-direction of '{a.record}'")
        return 0
    sys.stderr.write(render(result, a.out))
    if not result.plans.entries:
        raise UserError(f"tune: no problem-direction has a plan under these filters "
                        f"({(result.failed + result.plans.skipped + ['-'])[0]})")
    write_output(result.plans.to_json(), a.out, "--out")
    return 3 if result.failed else 0


def _interrupted(a, partial) -> None:
    """Note [tune interrupted]: the plan file is written only when every problem is done,
    so a file that ``run`` loads is never one that silently lacks problems. What
    finished is kept in the results store, where the same command picks it up; it is
    also written as a marked plan file beside -o (OUT.partial), so --no-store loses
    nothing finished either."""
    if partial is None or not partial.done or a.out == "-":
        say("interrupted before any problem finished: nothing written")
        return
    path = a.out + ".partial"
    kept = " (each finished direction is in the results store: the same command goes on " \
           "from there)" if not a.no_store else ""
    try:
        write_output(partial.plans.to_json(), path, "--out", quiet=True)
        where = f"; what finished is in '{path}' ({len(partial.plans.entries)} plans)"
    except UserError as e:
        where = f"; {e}"
    say(f"interrupted: {partial.done} of {len(partial.problems)} problems tuned; "
        f"'{a.out}' not written{where}{kept}")
