"""``plans write|show|check``: plan files, the engine config to run for every
problem-direction of a model, measured here and keyed as PyTorch's plan cache keys it."""
from __future__ import annotations

import sys
from typing import List

from ..core.errors import UserError
from ..core.options import ExploreOptions, parse_int
from ..core.plans import POLICIES
from .args import Parser, Refuse, check_rules
from .groups import add_env_filters, store_read
from .output import check_output_path, one_stdout, write_output

__all__ = ["build_parser", "run"]

ACTIONS = ("write", "show", "check")
WRITE_ONLY = ("--out", "--store", "--policy", "--max-workspace", "--deterministic", "--gpu",
              "--cudnn")
CHECK_ONLY = ("--device", "--allow-environment")
# The action is given as a pseudo-flag (SHOW, CHECK, WRITE), the positional file as FILE.
RULES = [
    Refuse("SHOW", WRITE_ONLY, "", text="{bad} would be ignored: plans show reads a plan "
                                        "file; drop {bad}"),
    Refuse("CHECK", WRITE_ONLY, "", text="{bad} would be ignored: plans check reads a plan "
                                         "file; drop {bad}"),
    Refuse("SHOW", CHECK_ONLY, "", text="{bad} would be ignored: only plans check uses it; "
                                        "drop {bad}"),
    Refuse("WRITE", CHECK_ONLY, "", text="{bad} would be ignored: only plans check uses it; "
                                         "drop {bad}"),
    Refuse("--store", ("FILE",), "", text="FILE would be ignored: --store writes the "
                                          "store's plans; drop one"),
]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer plans",
               description="Plan files: for every problem-direction, the engine config to "
                           "run (engine id, knobs, workspace, our steady median, why), keyed "
                           "as PyTorch's plan cache keys a convolution, with the environment "
                           "it was measured in. write SOURCE -o FILE: from a saved model "
                           "sweep (model --json) or exploration, or --store; show FILE; "
                           "check FILE: valid, and measured in this environment?")
    p.add("action", nargs="?", help=" | ".join(ACTIONS))
    p.add("file", nargs="?", help="write: the saved sweep or exploration; show, check: the "
                                  "plan file")
    p.add("-o", "--out", default=None, metavar="PATH", help="write: the plan file to write")
    p.add("--store", nargs="?", const="", default=None, metavar="PATH",
          help="write: from the results store instead of a file (default store "
               "~/.cache/cudnn_explorer/results.db)")
    p.add("--policy", default="best",
          help="write: best (default: the fastest re-timed config PyTorch's rules allow) | "
               "pytorch (benchmark mode's own pick, frozen)")
    p.add("--max-workspace", default=None, metavar="MiB",
          help="write: only configs whose workspace is at most this many MiB")
    p.add("--deterministic", action="store_true",
          help="write: only deterministic configs (with --policy pytorch: deterministic "
               "mode's pick); the plans are keyed for deterministic mode")
    add_env_filters(p)
    p.add("--device", default="0", help="check: the GPU to compare with (default 0)")
    p.add("--allow-environment", action="store_true",
          help="check: a file from another environment is reported, not refused")
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def run(argv: List[str]) -> int:
    a, flags = build_parser().parse_given(argv, f"plans: give an action ({', '.join(ACTIONS)})")
    if a.action not in ACTIONS:
        raise UserError(f"plans action {a.action!r}: valid: {', '.join(ACTIONS)}")
    check_rules(RULES, [a.action.upper()] + flags + (["FILE"] if a.file else []))
    if a.action == "write":
        return _write(a)
    if not a.file:
        raise UserError(f"plans {a.action}: give the plan file")
    from ..jobs.plans import read_plans
    from ..report.plans import render_plans

    plans = read_plans(a.file)
    if a.action == "show":
        sys.stdout.write(render_plans(plans))
        return 0
    return _check(a, plans)


def _write(a) -> int:
    if not a.out:
        raise UserError("plans write: give -o FILE, the plan file to write")
    if a.policy not in POLICIES:
        raise UserError(f"--policy '{a.policy}': valid: {', '.join(POLICIES)}")
    cap = None if a.max_workspace is None else ExploreOptions.create(
        source="cli", max_workspace_mib=a.max_workspace).max_workspace_mib
    reads = [(a.file, "the saved sweep or exploration")] + (
        store_read(a.store) if a.store is not None else [])
    check_output_path(a.out, "--out", reads)
    from ..jobs.plans import write_plans
    from ..report.plans import render_plans

    plans = write_plans(a.file, store=a.store, policy=a.policy, max_workspace_mib=cap,
                        deterministic=a.deterministic, gpus=a.gpu, cudnns=a.cudnn)
    if not plans.entries:
        raise UserError(f"plans write: no problem-direction has a plan under these filters "
                        f"({len(plans.skipped)} without: {plans.skipped[0] if plans.skipped else '-'})")
    if one_stdout([(a.out, "--out")]):  # "-o -": stdout carries the plan file alone
        sys.stdout.write(render_plans(plans))
    write_output(plans.to_json(), a.out, "--out")
    return 0


def _check(a, plans) -> int:
    from ..jobs.plans import environment_here
    from .output import notify

    device = parse_int(a.device, "--device", 0, 1023)
    print(f"plan file '{a.file}': valid: {len(plans.entries)} plans, policy {plans.policy}"
          f"{', deterministic' if plans.deterministic_only else ''}")
    here = environment_here(device)  # no GPU: MissingDependencyError, exit 3
    diff = plans.check_environment(here, override=a.allow_environment)
    if diff:
        notify("warning", f"measured in another environment: {'; '.join(diff)}")
    else:
        print(f"environment: the same as GPU {device} here ({here.gpu_name})")
    return 0
