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


def _fitted(rows: List[List[str]], headers: List[str]) -> str:
    """The table with its last column cut (~) where the row would pass 120 columns."""
    from ..report.format import WIDTH, table

    used = sum(max(len(str(c)) for c in col) + 2
               for col in zip(headers[:-1], *(r[:-1] for r in rows)))
    room = max(16, WIDTH - used)
    return table([r[:-1] + [_cut(r[-1], room)] for r in rows], headers=headers)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1].rstrip() + "~"


def _gpu(name: str) -> str:
    return _cut(name[len("NVIDIA "):] if name.startswith("NVIDIA ") else name, 24)


def run(argv: List[str]) -> int:
    from ..jobs.saved import history

    a, _ = build_parser().parse(argv)
    h = history(a.store, parse_int(a.limit, "--limit", 1))
    print(f"results store '{h.path}': {h.total} stored directions")
    if h.rows:
        print(_fitted([[r["created"][:19].replace("T", " "), _gpu(r["gpu"]), r["cudnn"],
                        _cut(r["torch"], 16), r["directions"], r["problem"]] for r in h.rows],
                      headers=["measured (UTC)", "GPU", "cuDNN", "torch", "directions",
                               "problem"]))
    if h.runs:
        print("\nPyTorch's own runs of models (one per mode):")
        print(_fitted([[r["created"][:19].replace("T", " "), _gpu(r["gpu"]), r["mode"],
                        r["model"]] for r in h.runs],
                      headers=["measured (UTC)", "GPU", "mode", "model"]))
    return 0
