"""``run --plans plans.json -- COMMAND``: run a program unchanged with every convolution
its processes run pinned to a plan file's plans (docs/zero-code.md)."""
from __future__ import annotations

import os
from typing import List

from ..core.errors import UserError
from ..core.options import parse_int
from .args import Parser
from .output import check_output_path, distinct_outputs, notify, say, write_output
from .record import refuse_command_files, split_command

__all__ = ["build_parser", "run"]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer run",
               description="Run COMMAND unchanged (after --) with every convolution its "
                           "Python processes run pinned to the plan file's plans, checked "
                           "against each process's GPU as pin() checks them. Each process "
                           "says at exit how many calls ran pinned.")
    p.add("--plans", default=None, metavar="PATH", help="the plan file")
    p.add("--strict", action="store_true",
          help="a convolution call the plans do not cover raises instead of falling back")
    p.add("--ahead", default="1", metavar="N",
          help="build the plans ahead on N threads (0: each on its first call; 1: default)")
    p.add("--no-keep", action="store_true",
          help="keep no built plans beside the plan file for the next run")
    p.add("--allow-environment", action="store_true",
          help="use a plan file measured in another environment")
    p.add("--report", default=None, metavar="PATH", help="write the merged JSON report there")
    p.add("--misses", default=None, metavar="PATH",
          help="append the problem-directions that fell back there (default: PLANS.misses; "
               "'' for none)")
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def run(argv: List[str]) -> int:
    options, command = split_command(argv, "run")
    a, _ = build_parser().parse(options)
    if not a.plans:
        raise UserError("run: give --plans FILE, the plan file to pin to")
    ahead = parse_int(a.ahead, "--ahead", 0, 64)
    reads = [(a.plans, "the plan file")]
    check_output_path(a.report, "--report", reads)
    refuse_command_files(a.report, "--report", command)
    if a.misses and a.misses != os.devnull:  # appended to, never replaced; '' writes none
        check_output_path(a.misses, "--misses", reads)
        refuse_command_files(a.misses, "--misses", command)
    distinct_outputs([(a.report, "--report"), (a.misses or None, "--misses")])
    from ..core.zero_code import exit_line
    from ..jobs.zero_code import report_json, run_pinned

    result = run_pinned(command, a.plans, strict=a.strict, ahead=ahead, keep=not a.no_keep,
                        allow_environment=a.allow_environment, misses=a.misses, notify=notify)
    if result.report is not None:
        if result.report.processes > 1:
            say(f"all {result.report.processes} processes: "
                f"{exit_line(result.report)[len('cudnn_explorer: '):]}")
        if a.report:
            write_output(report_json(result.report), a.report, "--report")
    elif a.report:
        say("no process ran a convolution: no report written")
    if result.status:
        say(f"the command exited {result.status}")
    return result.status
