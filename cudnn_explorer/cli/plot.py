"""``plot KIND FILE``: a saved result as PNG and SVG, with the data beside (no GPU needed)."""
from __future__ import annotations

import os
import sys
from typing import List

from ..core.errors import UserError
from ..core.options import parse_int
from .args import Parser

__all__ = ["build_parser", "run", "PLOTS"]

PLOTS = {"pareto": "time against workspace per direction, with the Pareto frontier and "
                   "PyTorch's picks (a saved exploration)",
         "roofline": "achieved TFLOP/s against arithmetic intensity, under the GPU's "
                     "ceilings (a saved exploration: its rows and configs; a model sweep: "
                     "one point per problem-direction)",
         "gaps": "the problem-directions where PyTorch's picks leave the most time per "
                 "iteration, with their share of the convolution time (a saved model "
                 "sweep)"}


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer plot",
               description="Plot a saved result as PNG and SVG (no GPU needed): "
                           + "; ".join(f"{k}: {v}" for k, v in PLOTS.items()))
    p.add("kind", nargs="?", help=" | ".join(PLOTS))
    p.add("file", nargs="?", help="a saved exploration (--json) or model sweep")
    p.add("--store", nargs="?", const="", default=None, metavar="PATH",
          help="plot a result from the results store instead of FILE (pareto, roofline; "
               "default store ~/.cache/cudnn_explorer/results.db)")
    p.add("--pick", default="1", metavar="N",
          help="with --store: the N-th most recently measured result (default 1)")
    p.add("--out", default=None, metavar="PATH",
          help="where to write (PATH.png, PATH.svg and PATH.json; default: beside FILE, or "
               "plot-KIND in this directory with --store)")
    p.add("--debug", action="store_true", help="show Python tracebacks on errors")
    return p


def run(argv: List[str]) -> int:
    from .groups import store_read
    from .output import plot_paths

    a, flags = build_parser().parse_given(argv, f"plot: give a kind ({', '.join(PLOTS)}) "
                                                f"and a saved file")
    if a.kind not in PLOTS:
        raise UserError(f"plot kind '{a.kind}': valid: {', '.join(PLOTS)}")
    if a.store is not None and a.file:
        raise UserError("FILE would be ignored: --store plots a stored result; drop one")
    if a.store is not None and a.kind == "gaps":
        raise UserError("plot gaps needs a saved model sweep (model --json); the store keeps "
                        "problems, not sweeps")
    if a.store is None and "--pick" in flags:
        raise UserError("--pick would be ignored: it picks among the results store's "
                        "results (--store); a FILE holds one")
    if a.store is None and not a.file:
        raise UserError(f"plot {a.kind}: give a saved file, e.g. data/reference/"
                        f"h200-default-fp32.json, or --store")
    pick = parse_int(a.pick, "--pick", 1)
    out = a.out or (os.path.splitext(a.file)[0] + f".{a.kind}" if a.file else f"plot-{a.kind}")
    plot_paths(out, "--out", [(a.file, "the saved result")]
               + (store_read(a.store) if a.store is not None else []))
    from ..report import plots

    sweep = _sweep(a) if a.kind == "gaps" or (a.kind == "roofline" and a.file
                                                and _is_sweep(a.file)) else None
    if sweep is not None:
        from ..report import sweep_plots

        fig = (sweep_plots.gaps if a.kind == "gaps" else sweep_plots.roofline)(sweep)
    else:
        fig = (plots.pareto if a.kind == "pareto" else plots.roofline)(_exploration(a, pick))
    for path in plots.save(fig, out):
        print(f"wrote {path}", file=sys.stderr)
    return 0


def _is_sweep(path: str) -> bool:
    """Whether the saved file at ``path`` says it is a model sweep (its schema)."""
    from ..core.documents import saved_schema

    return saved_schema(path) == "cudnn_explorer.sweep"


def _sweep(a):
    from ..core.documents import kind_hint
    from ..core.files import read_bytes
    from ..core.model_sweep import ModelSweep

    data = read_bytes(a.file, "plot")
    try:
        return ModelSweep.from_json(data)
    except UserError as e:
        raise UserError(f"plot {a.kind} '{a.file}': {e} ({a.kind} plots a model sweep)"
                        f"{kind_hint(data, 'cudnn_explorer.sweep')}") from None


def _exploration(a, pick: int):
    if a.file:
        from ..core.documents import load_exploration

        return load_exploration(a.file, f"plot {a.kind}")
    from ..jobs.saved import stored_exploration

    exp = stored_exploration(a.store or None, pick)
    print(f"plotting {exp.problem.describe()} on {exp.environment.gpu_name}, measured "
          f"{exp.created}", file=sys.stderr)
    return exp
