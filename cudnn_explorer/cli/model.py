"""``model NAME``: capture every convolution of one iteration of a model, then explore each
unique problem; also --capture-only, --target, --load, and one rank of a torchrun sweep."""
from __future__ import annotations

import sys
from typing import List

from ..core.errors import UserError
from ..core.options import parse_int, profile_name
from .args import Needs, Parser, Refuse, check_rules
from .groups import (HARMLESS, PLANS_RULES, RUN_FLAGS, add_model_args, add_plans_args,
                     add_run_args, checked_plans, model_spec_from_args, options_from_args,
                     positional, run_rules, store_choice, store_read, TORCHRUN_DEVICE)
from .output import (check_output_path, distinct_outputs, error, process_age_s, say,
                     write_output)

__all__ = ["build_parser", "run", "conflicts", "render_saved"]

MODEL_RUN_FLAGS = ("--timed-iterations",)
MODEL_PROFILE_HELP = (
    "quick (default): the legacy rows of Find under PyTorch's math type, PyTorch's picks "
    "and every engine config its heuristics and fallbacks list, in a staged search "
    "(finalists with 10 ms budgets); "
    "PyTorch's run of the model in benchmark, heuristics and deterministic mode; "
    "thorough: Find under every math type, every engine's knob space sampled too, every "
    "config with 100 ms budgets, "
    "and benchmark mode with every candidate timed (any --budget-ms, --engine-budget-s "
    "given wins)")
_MEASURING = tuple(f for f in RUN_FLAGS + MODEL_RUN_FLAGS
                   if f not in HARMLESS and f != "--device")
RULES = [
    *run_rules(("--timed-iterations",)),
    Refuse("--target", _MEASURING,
           "--target ranks heuristics for other GPUs and measures nothing"),
    Refuse("--capture-only", _MEASURING + ("--target",), "--capture-only explores nothing"),
    Needs("--plot", ("--target",), "--plot needs --target (the heatmap is of the targets' picks)"),
    Refuse("--input", ("--image",), "--input gives the whole shape", drop="drop one"),
    Refuse("--sizes", ("--image",), "--sizes gives the input sizes (3xSxS, or --input's shape "
                                    "with its height and width set to S)", drop="drop one"),
    Refuse("--resume", ("--refresh", "--no-store"), "",
           text="--resume needs the results store: drop {bad} or --resume"),
    Refuse("--plans", ("--no-pytorch", "--capture-only", "--target"),
           "--plans adds the pinned mode to PyTorch's own run of the model"),
    *PLANS_RULES,
]
UNDER_TORCHRUN = [  # checked under torchrun, with the pseudo-flag TORCHRUN
    TORCHRUN_DEVICE,
    Refuse("TORCHRUN", ("--plans",), "", text="--plans: the pinned mode of a sweep under "
                                              "torchrun is not supported yet; run it without "
                                              "torchrun"),
]


def build_parser() -> Parser:
    p = Parser(
        prog="python -m cudnn_explorer model",
        description="Capture every convolution of one iteration of a model (what cuDNN "
                    "really gets, after autocast), then explore each unique problem: "
                    "PyTorch's pick, the best legacy algorithm and the best engine config, "
                    "in ms per iteration.")
    m = p.group("model")
    add_model_args(m, "variable input sizes: capture at each size S (320:640:32 or "
                      "320,416,512), the input 3xSxS or --input's shape with its height and "
                      "width set to S, and count the new problems each one brings")
    m.add("--capture-only", action="store_true",
          help="list the unique problems and their layers; explore nothing")
    m.add("--target", metavar="GPUS",
          help="no measurement: PyTorch's heuristic pick for every unique problem on other "
               "GPUs, from cuDNN's deviceless heuristics (e.g. h200,a100,l4)")
    m.add("--plot", metavar="PNG", help="with --target: a heatmap of the picks")
    add_plans_args(m, "PyTorch's own run of the model gets a pinned mode too: the model "
                      "pinned to the file's plans, in a fresh process; per layer the plan "
                      "that ran, its first call and memory")
    m.add("--consistency", action="store_true",
          help="under torchrun: every rank runs every problem, and rank 0 reports where "
               "identical GPUs differ (needs --json PATH: each rank writes PATH.rankN.json)")
    m.add("--resume", action="store_true",
          help="measure only what the results store lacks (the default whenever the store "
               "is on; after a run that was interrupted or lost a rank)")
    m.add("--timed-iterations", default="20",
          help="steady iterations timed in PyTorch's own run of the model, per mode "
               "(default 20, after 5 warm-up ones)")
    add_run_args(p, MODEL_PROFILE_HELP)
    p.set_defaults(direction="all")
    o = p.group("output")
    o.add("--json", default=None, metavar="PATH",
          help="write the sweep (or the capture) to PATH, after every problem")
    o.add("--load", metavar="PATH", help="render a saved sweep (no GPU needed)")
    o.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def conflicts(parser: Parser, what: str) -> Refuse:
    """--load of a model command: every other flag (but the harmless ones) and a NAME."""
    return Refuse("--load", tuple(f for f in parser.flags if f not in ("--load",) + HARMLESS)
                  + ("NAME",), f"--load renders a saved {what}")


def render_saved(parser: Parser, a, flags: List[str], what: str, parse, render) -> int:
    """--load of a model command: no other flag (but the harmless ones) and no NAME; the
    saved ``what`` read with ``parse`` and rendered (no GPU needed)."""
    from ..core.files import read_bytes

    check_rules([conflicts(parser, what)], positional(flags, a))
    data = read_bytes(a.load, "--load")  # its errors name the file already
    try:
        saved = parse(data)
    except UserError as e:
        from ..core.documents import kind_hint

        raise UserError(f"--load '{a.load}': {e}"
                        f"{kind_hint(data, f'cudnn_explorer.{what}')}") from None
    sys.stdout.write(render(saved))
    return 0


def run(argv: List[str]) -> int:
    parser = build_parser()
    a, flags = parser.parse_given(argv, "model: give a model, e.g. model resnet50 --batch 32 "
                                        "--amp fp16")
    if a.load:
        from ..core.model_sweep import ModelSweep
        from ..report.model import render_sweep

        return render_saved(parser, a, flags, "sweep", ModelSweep.from_json, render_sweep)
    check_rules(RULES, flags)
    from .targets import profile_files, profiles

    reads = [(a.plans, "the plan file")] + store_read(a.store, not a.no_store) + \
        profile_files(a.target)
    check_output_path(a.plot, "--plot", reads)

    target_profiles = profiles(a.target) if a.target else None
    spec = model_spec_from_args(a)
    keep = [k for k, f in (("budget_ms", "--budget-ms"), ("engine_budget_s", "--engine-budget-s"))
            if f in flags]
    options = options_from_args(a, engines=not a.no_engines)  # SweepRun applies the profile
    profile = profile_name(a.profile)
    iterations = parse_int(a.timed_iterations, "--timed-iterations", 1, 10000)
    check_output_path(a.json, "--json", reads)
    distinct_outputs([(a.json, "--json"), (a.plot, "--plot")])
    checked_plans(a.plans)  # a bad plan file is refused before the model runs
    from ..jobs.sweep import SweepSettings
    from ..model import distributed

    settings = SweepSettings.create(profile=profile, keep=keep, iterations=iterations,
                                    store=store_choice(a), plans=a.plans,
                                    uncovered=a.uncovered or "off",
                                    allow_environment=a.allow_environment)

    world = distributed.world_from_env()
    if a.consistency and world is None:
        raise UserError("--consistency compares the GPUs of a torchrun sweep; start it with "
                        "torchrun --nproc-per-node N -m cudnn_explorer model ...")
    if world is not None and not (a.capture_only or a.target):
        from .ranks import run_rank

        check_rules(UNDER_TORCHRUN, ["TORCHRUN"] + flags)
        return run_rank(a, world, spec, options, settings)
    return _run_here(a, spec, options, settings, target_profiles)


def _run_here(a, spec, options, settings, target_profiles) -> int:
    from ..jobs import lazy_measure
    from ..jobs.sweep import SweepRun
    from .output import progress_lines

    # Note [model children started ahead]: PyTorch's mode processes import while this one
    # imports torch and captures, and so does the engine worker (Note [engine worker
    # started ahead] in jobs/sweep.py)
    clock = Startup()
    step, stepped = progress_lines(a.verbose, a.quiet)  # the capture, before the bar
    bar = _Bar(a, clock)
    with SweepRun(spec, options, settings, notify=bar.told, progress=bar.progress,
                  start=not (a.capture_only or a.target)) as run:
        lazy_measure.measuring()
        import torch

        clock.mark("torch and the extension imported")
        device = "cpu" if (a.capture_only or a.target) and not torch.cuda.is_available() \
            else f"cuda:{options.device}"
        try:
            cap = run.capture(device, progress=step)
        finally:
            stepped()  # the line in place is cleared, also before an error's line
        clock.mark("the model built and captured", cap.seconds)
        return _captured(a, run, target_profiles, bar, clock)


class _Bar:
    """The sweep's progress bar on stderr (none with --quiet), shown once the capture is
    done; with it, the store's answers ("info") show in it instead of on a line."""

    def __init__(self, a, clock: "Startup"):
        self.a, self.clock, self.bar = a, clock, None

    def show(self, total: int) -> None:
        if not self.a.quiet:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="problem", file=sys.stderr,
                            dynamic_ncols=True, disable=None if not self.a.verbose else False)

    def progress(self, done: int, total: int, msg: str) -> None:
        self.clock.mark("until the sweep's first step")  # PyTorch's run, or the problems
        if self.bar is not None:
            self.bar.n = done
            self.bar.set_postfix_str(msg[:60], refresh=True)

    def told(self, kind: str, text: str) -> None:
        from .output import notify

        if self.bar is None or kind != "info":
            notify(kind, text)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class Startup:
    """Where a model command's time went before its sweep began (s since the process
    started, from /proc): marks in order, each the seconds since the one before; a
    mark's ``inner`` (the capture proper) is said apart from the rest of its span.
    Nothing where /proc does not say the process's age."""

    def __init__(self):
        age = process_age_s()
        self.marks = [] if age is None else [
            ("the interpreter, the tool's imports and the arguments", age, None)]

    def mark(self, name: str, inner=None) -> None:
        """``name`` ended now; ``inner``: the seconds of its part said apart."""
        if not self.marks or any(m[0] == name for m in self.marks):
            return
        age = process_age_s()
        if age is not None:
            self.marks.append((name, age, inner))

    def text(self) -> str:
        """"before the sweep's first step: 10.6 s since the process started: ..." (""
        without marks)."""
        if len(self.marks) < 2:
            return ""
        parts, last = [], 0.0
        for name, age, inner in self.marks:
            span = max(age - last, 0.0)
            if inner is not None and 0.0 <= inner <= span:
                parts.append(f"{name} {span:.1f} (the capture itself {inner:.1f})")
            else:
                parts.append(f"{name} {span:.1f}")
            last = age
        return (f"before the sweep's first step: {last:.1f} s since the process started: "
                + ", ".join(parts) + " s")


def _captured(a, run, target_profiles, bar: _Bar, clock: "Startup") -> int:
    from ..report.model import render_capture, render_sweep

    cap = run.capture()
    if a.target and cap.problems:
        from .targets import run_model_targets

        return run_model_targets(a, cap, target_profiles)
    if a.capture_only or not cap.problems:
        if a.json != "-":  # "--json -": stdout carries the file alone
            sys.stdout.write(render_capture(cap))
        if a.json:
            write_output(cap.to_json() + "\n", a.json, "--json")
        return 0
    bar.show(len(cap.problems))
    last = []  # the sweep as last saved, for "--json -" when interrupted

    def save(sw):  # "--json -" is written once, at the end (or at an interruption)
        last[:] = [sw]
        if a.json and a.json != "-":
            write_output(sw.to_json() + "\n", a.json, "--json", quiet=True)

    store = run.settings.store
    try:
        sw = run.sweep(save)
    except KeyboardInterrupt:
        bar.close()
        if a.json == "-" and last:  # stdout carries what finished, and only that
            write_output(last[0].to_json() + "\n", "-", "--json", quiet=True)
        kept = ([f"'{a.json}'"] if a.json != "-" else ["stdout"] if last else []) \
            if a.json else []
        if store.use:
            from ..store.db import default_path

            kept.append(f"the results store '{store.path or default_path()}'")
        say("interrupted: every direction that finished is in "
            + (" and ".join(kept) if kept else "nothing (no --json, no store)")
            + "; run the same command again to measure only the rest")
        return 130
    finally:
        bar.close()
    if a.json == "-":  # stdout carries the sweep alone
        write_output(sw.to_json() + "\n", a.json, "--json")
    else:
        sys.stdout.write(render_sweep(sw))
    if a.verbose and clock.text():
        print(clock.text(), file=sys.stderr)
    if a.json and a.json != "-":
        print(f"wrote {a.json}", file=sys.stderr)
    failed = [e for e in sw.entries if e.error]
    if failed:
        error(f"{len(failed)} of {len(cap.problems)} problems were not explored; the report "
              f"lists why")
        return 3
    return 0
