"""``history``: what the results store holds, newest first."""
from __future__ import annotations

from typing import List

from ..core.options import parse_int
from .args import Parser

__all__ = ["build_parser", "run"]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer history",
               description="The results in the store, newest first.")
    p.add("--store", default=None, metavar="PATH")
    p.add("--limit", default="50", help="at most this many rows (default 50)")
    p.add("--debug", action="store_true")
    return p


def run(argv: List[str]) -> int:
    from ..jobs.saved import history
    from ..report.format import table

    a, _ = build_parser().parse(argv)
    h = history(a.store, parse_int(a.limit, "--limit", 1))
    print(f"results store '{h.path}': {h.total} stored directions")
    if h.rows:
        print(table([[r["created"][:19].replace("T", " "), r["gpu"], r["cudnn"], r["torch"],
                      r["directions"], r["problem"][:60]] for r in h.rows],
                    headers=["measured (UTC)", "GPU", "cuDNN", "torch", "directions",
                             "problem"]))
    if h.runs:
        print("\nPyTorch's own runs of models (one per mode):")
        print(table([[r["created"][:19].replace("T", " "), r["gpu"], r["mode"],
                      r["model"][:70]] for r in h.runs],
                    headers=["measured (UTC)", "GPU", "mode", "model"]))
    return 0
