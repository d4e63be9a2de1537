"""``compare``: results side by side across environments (GPUs, cuDNN, torch)."""
from __future__ import annotations

import sys
from typing import List

from ..core.errors import UserError
from .args import Parser, Refuse, check_rules
from .groups import add_env_filters, store_choice, store_read
from .output import notify, plot_paths

__all__ = ["build_parser", "run", "RULES"]

RULES = [Refuse("--no-store", ("--store",), "--no-store reads no store", drop="drop one")]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer compare",
               description="Side by side across environments (GPUs, cuDNN, torch): what "
                           "each one's PyTorch picked, its best legacy algorithm and best "
                           "engine config, for every problem measured in two or more.")
    p.add("--store", default=None, metavar="PATH",
          help="read the results store (default ~/.cache/cudnn_explorer/results.db)")
    p.add("--no-store", action="store_true", help="only the --file results")
    p.add("--file", action="append", default=[], metavar="PATH",
          help="a saved --json result (one problem, an export, or a model sweep); repeat "
               "for several")
    add_env_filters(p)
    p.add("--plot", default=None, metavar="PATH",
          help="also a heatmap (PATH.png and PATH.svg): problems x environments, colour = "
               "PyTorch's pick's time relative to the fastest environment's")
    p.add("--debug", action="store_true")
    return p


def run(argv: List[str]) -> int:
    a, flags = build_parser().parse(argv)
    check_rules(RULES, flags)
    if a.plot:
        plot_paths(a.plot, "--plot", [(f, "a --file result") for f in a.file]
                   + store_read(a.store, not a.no_store))
    from ..jobs.saved import compare_items
    from ..report.compare import render_compare

    items = compare_items(store_choice(a), a.file, a.gpu, a.cudnn, notify)
    if not items:
        raise UserError("compare: no results (measure some, or give --file)")
    sys.stdout.write(render_compare(items))
    if a.plot:
        from ..report import plots

        for path in plots.save(plots.environments(items), a.plot):
            print(f"wrote {path}", file=sys.stderr)
    return 0
