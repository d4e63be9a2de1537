"""``advise NAME``: should torch.backends.cudnn.benchmark be on for this workload?"""
from __future__ import annotations

import sys
from typing import List

from ..core.errors import UserError
from ..core.options import ExploreOptions, parse_int
from .args import Parser, Refuse, check_rules
from .groups import (PLANS_RULES, add_model_args, add_plans_args, add_store_args,
                     checked_plans, model_spec_from_args, store_choice, store_read)
from .model import render_saved
from .output import check_output_path, error, notify, progress_lines, write_output

__all__ = ["build_parser", "run", "RULES"]

RULES = [
    Refuse("--shape-dist", ("--sizes", "--image"), "--shape-dist gives the input sizes",
           drop="drop one"),
    Refuse("--input", ("--image",), "--input gives the whole shape", drop="drop one"),
    Refuse("--sizes", ("--image",), "--sizes gives the input sizes (3xSxS, or --input's shape "
                                    "with its height and width set to S)", drop="drop one"),
    Refuse("--no-store", ("--store", "--refresh"), "--no-store uses no store",
           drop="drop one"),
    Refuse("--quiet", ("--verbose",), "--quiet turns progress off"),
    *PLANS_RULES,
]


def build_parser() -> Parser:
    p = Parser(
        prog="python -m cudnn_explorer advise",
        description="Should torch.backends.cudnn.benchmark be on for this workload? Runs "
                    "the model in fresh processes with benchmark on, off and deterministic, "
                    "at every input size, and weighs the first calls' cost against the "
                    "steady-state saving over --iterations iterations.")
    m = p.group("workload")
    add_model_args(m, "variable input sizes S, equally frequent (320:640:32 or "
                      "320,416,512): the input 3xSxS or --input's shape with its height and "
                      "width set to S")
    m.add("--shape-dist", default=None, metavar="FILE",
          help="variable input sizes with their frequencies, as --sizes: one 'SIZE COUNT' "
               "per line")
    m.add("--iterations", default="10000",
          help="how many iterations the workload runs (default 10000)")
    m.add("--repeats", default="0", metavar="K",
          help="pick stability: K more runs of the model with benchmark on (2 to 50), each "
               "in a fresh process; per layer, how often each plan was picked and the "
               "steady-time spread between those plans (default 0: off)")
    add_plans_args(m, "a third mode, the model pinned to its plans in a fresh process, "
                      "weighed beside benchmark on and off")
    r = p.group("run")
    r.add("--device", default="0", help="CUDA device index (default 0)")
    r.add("--seed", default="0", help="seed of the model's weights and inputs")
    r.add("--benchmark-limit", default=None, metavar="N",
          help="torch.backends.cudnn.benchmark_limit with benchmark on (default: PyTorch's, "
               "10)")
    r.add("--child-timeout", default="300",
          help="seconds per input size before a run of the model is declared hung")
    r.add("--target-ci", default="0.5",
          help="time steady iterations until each mean's 95%% confidence interval is within "
               "+-this %% (default 0.5; at most a minute per size)")
    r.add("--no-graph", action="store_true",
          help="time the steady iterations eagerly (host time included) instead of as "
               "replays of a CUDA graph of the whole step")
    r.add("--quiet", action="store_true", help="no progress lines on stderr")
    r.add("--verbose", action="store_true",
          help="progress lines with the seconds since the start, as model --verbose")
    add_store_args(r, "the results store: runs of the model measured before with the same "
                      "settings answer from it (default ~/.cache/cudnn_explorer/results.db)",
                   "use no results store",
                   "run the model again even where the store has the runs")
    o = p.group("output")
    o.add("--json", default=None, metavar="PATH", help="write the advice to PATH")
    o.add("--load", metavar="PATH", help="render a saved advice (no GPU needed)")
    o.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def run(argv: List[str]) -> int:
    from ..core.advice import Advice
    from ..report.advice import render_advice

    parser = build_parser()
    a, flags = parser.parse_given(argv, "advise: give a model, e.g. advise resnet50 --batch "
                                        "32 --amp fp16")
    if a.load:
        return render_saved(parser, a, flags, "advice", Advice.from_json, render_advice)
    check_rules(RULES, flags)
    spec = model_spec_from_args(a)
    sizes = None
    if a.shape_dist:
        from ..core.workload_sizes import parse_shape_dist
        from ..core.files import read_text

        sizes = parse_shape_dist(read_text(a.shape_dist, "--shape-dist"), a.shape_dist)
    iterations = parse_int(a.iterations, "--iterations", 1, 10**12)
    try:
        target = float(a.target_ci)
    except ValueError:
        target = float("nan")
    if not 0.01 <= target <= 50:
        raise UserError(f"--target-ci {a.target_ci}: valid: a percentage from 0.01 to 50")
    repeats = parse_int(a.repeats, "--repeats", 0)
    if repeats == 1 or repeats > 50:
        raise UserError(f"--repeats {repeats}: valid: 0 (off) or 2 to 50 fresh processes")
    options = ExploreOptions.create(source="cli", device=a.device, seed=a.seed,
                                    child_timeout_s=a.child_timeout,
                                    benchmark_limit=a.benchmark_limit)
    check_output_path(a.json, "--json", [(a.shape_dist, "the --shape-dist file"),
                                         (a.plans, "the plan file")]
                      + store_read(a.store, not a.no_store))
    checked_plans(a.plans)  # a bad plan file is refused before the model runs
    from ..jobs.advise import advise

    timed = progress_lines(True, False)[0] if a.verbose else None

    def say(msg):
        if timed is not None:
            timed(msg)
        elif not a.quiet:
            print(f"[advise] {msg}", file=sys.stderr, flush=True)

    adv = advise(spec, iterations=iterations, sizes=sizes, options=options,
                 target_ci=target / 100, graph=not a.no_graph, repeats=repeats,
                 store=store_choice(a), plans=a.plans, uncovered=a.uncovered or "off",
                 allow_environment=a.allow_environment, progress=say, notify=notify)
    if a.json:
        write_output(adv.to_json() + "\n", a.json, "--json")
    table = a.json != "-"  # "--json -": stdout carries the file alone
    if not adv.decidable:
        from ..report.model import render_model_run

        if table:
            sys.stdout.write(render_model_run(adv.pytorch_run, adv.capture))
        error("the runs of the model with benchmark on and off are both needed for a "
              "verdict; see above")
        return 3
    if table:
        sys.stdout.write(render_advice(adv))
    return 0
