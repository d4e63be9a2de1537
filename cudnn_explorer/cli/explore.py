"""The default verb: one problem, ``python -m cudnn_explorer --shape 32,3,224,224
--kernel 3``; also --load (a saved result), --info, --target and --dump-device-profile."""
from __future__ import annotations

import argparse
import sys
from typing import List

from ..core.errors import ExplorerError, Interrupted, UserError
from ..core.options import parse_int
from ..core.problem import ConvProblem
from ..jobs import lazy_measure
from .args import Parser, Refuse, check_rules, tf32
from .groups import (HARMLESS, RUN_FLAGS, add_run_args, options_from_args, run_rules,
                     store_choice, store_read)
from .output import (check_output_path, distinct_outputs, error, notify, one_stdout,
                     process_age_s, progress_lines, write_output)

__all__ = ["build_parser", "run", "CONFLICTS", "PROBLEM_FLAGS"]

PROBLEM_FLAGS = ("--shape", "--out-channels", "--kernel", "--stride", "--padding", "--dilation",
                 "--groups", "--dtype", "--tf32", "--layout")
_RUN = tuple(f for f in RUN_FLAGS if f not in HARMLESS)
_RUN_NOT_DEVICE = tuple(f for f in _RUN if f != "--device")
# What a flag contradicts, or would make the run ignore (harmless flags are taken).
CONFLICTS = [
    Refuse("--load", PROBLEM_FLAGS + _RUN + ("--info",), "--load renders a saved file"),
    Refuse("--info", PROBLEM_FLAGS + _RUN_NOT_DEVICE + ("--json", "--csv", "--engines"),
           "--info only prints versions and GPUs"),
    *run_rules(),
    Refuse("--target", tuple(f for f in _RUN if f not in ("--direction", "--benchmark-limit",
                                                          "--store", "--no-store"))
           + ("--csv", "--load", "--info", "--engines", "--dump-device-profile"),
           "--target ranks heuristics for other GPUs and measures nothing"),
    Refuse("--dump-device-profile", PROBLEM_FLAGS + _RUN_NOT_DEVICE
           + ("--json", "--csv", "--load", "--info", "--engines"),
           "--dump-device-profile only writes this GPU's profile"),
]


def build_parser() -> Parser:
    p = Parser(
        prog="python -m cudnn_explorer", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="List every cuDNN convolution algorithm for a problem, with cuDNN's own\n"
                    "time (ms), workspace (MiB), math type and determinism.",
        epilog="commands (each has --help):\n"
               "  model NAME     every convolution of a model, explored; PyTorch's own run "
               "of it\n"
               "  advise NAME    should benchmark mode be on for this workload?\n"
               "  compare        results side by side across GPUs and versions\n"
               "  history        what the results store holds\n"
               "  export         the store as JSON or CSV\n"
               "  plot KIND FILE pareto, roofline or gaps, as PNG and SVG\n"
               "  plans          plan files: the engine config to run per convolution\n"
               "  record, tune, run  any training script: record its convolutions, tune "
               "them, run it pinned")
    g = p.group("problem")
    g.add("--shape", help="input N,C,L (1-D), N,C,H,W (2-D) or N,C,D,H,W (3-D)")
    g.add("--out-channels", default="64", help="output channels (default 64)")
    g.add("--kernel", default="3", help="kernel size: one int or one per spatial dim")
    g.add("--stride", default="1", help="one int or one per spatial dim (default 1)")
    g.add("--padding", default=None,
          help="one int or one per spatial dim (default kernel//2 per dim)")
    g.add("--dilation", default="1", help="one int or one per spatial dim")
    g.add("--groups", default="1", help="groups (= C for depthwise)")
    g.add("--dtype", default="float32", help="float32, float16, bfloat16, float64")
    g.add("--tf32", default=None,
          help="on|off, float32 only (default on, like torch.backends.cudnn.allow_tf32)")
    g.add("--layout", default="nchw", help="nchw | nhwc (channels_last)")
    add_run_args(p).add("--direction", default="all", help="fwd | bwd-data | bwd-filter | all")
    o = p.group("output")
    o.add("--json", nargs="?", const="-", default=None, metavar="PATH",
          help="write JSON (schema cudnn_explorer.exploration) to PATH or stdout")
    o.add("--csv", nargs="?", const="-", default=None, metavar="PATH",
          help="write CSV, one row per algorithm, to PATH or stdout")
    o.add("--load", metavar="PATH",
          help="render a saved --json file instead of running (no GPU needed)")
    o.add("--target", metavar="GPUS",
          help="no measurement: cuDNN's heuristic ranking for other GPUs from their device "
               "profiles (e.g. a100,l4,v100,b200, or a profile file; 'list' lists them); "
               "needs no GPU")
    o.add("--dump-device-profile", metavar="PATH",
          help="write this GPU's cuDNN device profile (JSON) to PATH, for --target")
    o.add("--info", action="store_true",
          help="print build-time and running torch/CUDA/cuDNN versions and GPUs")
    o.add("--debug", action="store_true", help="show Python tracebacks on errors")
    o.add("--version", action="store_true", help="print the version and exit")
    return p


def problem_from_args(a) -> ConvProblem:
    if a.shape is None:
        raise UserError("--shape is required, e.g. --shape 32,3,224,224 (or use --info / --load); "
                        "--help lists every option")
    return ConvProblem.create(a.shape, out_channels=a.out_channels, kernel=a.kernel,
                              stride=a.stride, padding=a.padding, dilation=a.dilation,
                              groups=a.groups, dtype=a.dtype, layout=a.layout, tf32=tf32(a.tf32),
                              source="cli")


def run(argv: List[str]) -> int:
    a, flags = build_parser().parse_given(
        argv, "nothing to do: give --shape (e.g. --shape 32,3,224,224 --kernel 3), --load FILE "
              "or --info; --help lists every option")
    if a.version:
        from ..core.version import __version__

        print(f"cudnn_explorer {__version__}")
        return 0
    check_rules(CONFLICTS, flags)
    one_stdout([(a.json, "--json"), (a.csv, "--csv")])  # both "-": refused
    distinct_outputs([(a.json, "--json"), (a.csv, "--csv"),
                      (a.dump_device_profile, "--dump-device-profile")])
    from .targets import profile_files

    reads = store_read(a.store, not a.no_store) + [(a.load, "the saved result")] + \
        profile_files(a.target)
    check_output_path(a.json, "--json", reads)
    check_output_path(a.csv, "--csv", reads)
    from ..report import export, tables

    if a.info:
        print(tables.render_info(lazy_measure.info(parse_int(a.device, "--device"))))
        return 0
    if a.dump_device_profile:
        check_output_path(a.dump_device_profile, "--dump-device-profile", reads)
        text = lazy_measure.dump_device_profile(parse_int(a.device, "--device"))
        write_output(text, a.dump_device_profile, "--dump-device-profile")
        return 0
    if a.target:
        from .targets import run_targets

        return run_targets(a, problem_from_args)
    if a.load:
        from ..core.documents import load_exploration

        exp = load_exploration(a.load)
    else:
        exp = _explore(a)
    code = None
    if _interrupted(exp):  # what finished is shown and saved, then the exit
        names = ", ".join(d.direction for d in exp.directions)
        asked = exp.measurement.options.get("directions") or ()
        error(f"interrupted: {len(exp.directions)} of {len(asked)} directions finished "
              f"({names}); their results "
              f"are shown" + (f" and saved in '{a.json}' (\"complete\": false)" if a.json
                              else "") + " (--store keeps each finished direction too)")
        code = 130
    try:
        # The table first whenever stdout is free, so a failed write loses nothing shown.
        if "-" not in (a.json, a.csv):
            sys.stdout.write(tables.render_exploration(exp, show_engines=a.engines))
        if a.verbose and not a.load:  # where the time went, beside the progress lines
            for line in tables.wall_lines(exp):
                print(line, file=sys.stderr)
            age = process_age_s()
            if age is not None:
                print(f"process: {age:.1f} s since it started (the interpreter, imports, "
                      f"the results store and the exploration)", file=sys.stderr)
        if a.json is not None:
            # an incomplete result's own line names the file: no "wrote" line beside it
            write_output(exp.to_json() + "\n", a.json, "--json", quiet=not exp.complete)
        if a.csv is not None:
            write_output(export.rows_to_csv(exp), a.csv, "--csv")
    except (ArithmeticError, LookupError, TypeError, ValueError) as e:
        if not a.load or isinstance(e, ExplorerError) or a.debug:
            raise
        # Each field was checked on load; a combination of them can still be one that no
        # run writes. The file is at fault, not the machine: exit 2, naming it.
        raise UserError(f"--load '{a.load}': fields that do not fit together "
                        f"({type(e).__name__}: {str(e)[:80]})") from None
    if code is not None:
        return code
    return 0 if a.load else _exit_code(exp, a)


def _explore(a):
    from ..jobs.explore import explore

    problem = problem_from_args(a)
    options = options_from_args(a, engines=not a.no_engines)
    progress, done = progress_lines(a.verbose, a.quiet)
    try:
        return explore(problem, options, progress, store=store_choice(a),
                       skip_engines_if_unbuilt=not a.engines, notify=notify)
    except Interrupted as e:
        if e.partial is None:  # nothing had finished
            raise
        return e.partial
    finally:
        done()


def _interrupted(exp) -> bool:
    """Whether ``exp`` was cut short by Ctrl-C (or SIGTERM): incomplete, and a direction
    asked for is not there, or none says why it did not finish (its ``error``)."""
    if exp.complete:
        return False
    done = {d.direction for d in exp.directions}
    asked = exp.measurement.options.get("directions") or ()
    return any(x not in done for x in asked) or not any(d.error for d in exp.directions)


def _exit_code(exp, a) -> int:
    """3 when a direction did not finish, 2 when cuDNN ran nothing for one (what finished
    was shown and saved before: ``a``'s --json file holds it, marked incomplete)."""
    unfinished = [d for d in exp.directions if d.error]
    if unfinished:
        kept = [d.direction for d in exp.directions if d.find or d.engines is not None]
        where = [w for w, given in (("shown", "-" not in (a.json, a.csv)),
                                    (f"saved in '{a.json}' (\"complete\": false)",
                                     a.json not in (None, "-")),
                                    ("written to stdout", "-" in (a.json, a.csv))) if given]
        error(f"{unfinished[0].direction}: {unfinished[0].error}"
              + (f" (and {len(unfinished) - 1} more direction(s))" if len(unfinished) > 1
                 else "")
              + (f"; results kept for {', '.join(kept)}, {' and '.join(where)}" if kept
                 else ""))
        return 3
    failed = [d.direction for d in exp.directions if d.best() is None]
    if failed:
        error(f"cuDNN ran no algorithm for {', '.join(failed)} of {exp.problem.describe()}")
        return 2
    return 0
