"""``export``: the results store as one JSON file of explorations and/or CSV rows."""
from __future__ import annotations

import os
import sys
from typing import List

from ..core.errors import UserError
from .args import Parser
from .groups import add_env_filters, store_read
from .output import check_output_path, distinct_outputs, one_stdout, write_output

__all__ = ["build_parser", "run"]


def build_parser() -> Parser:
    p = Parser(prog="python -m cudnn_explorer export",
               description="Write what the results store holds: --json (one file of every "
                           "stored exploration) and/or --csv (legacy rows, engine configs and "
                           "PyTorch's picks, told apart by the kind column).")
    p.add("--store", default=None, metavar="PATH",
          help="the results store (default ~/.cache/cudnn_explorer/results.db)")
    p.add("--json", default=None, metavar="PATH", help="write the explorations here")
    p.add("--csv", default=None, metavar="PATH", help="write their rows here")
    add_env_filters(p)
    p.add("--debug", action="store_true")
    return p


def run(argv: List[str]) -> int:
    a, _ = build_parser().parse(argv)
    if not a.json and not a.csv:
        raise UserError("export: give --json PATH and/or --csv PATH")
    one_stdout([(a.json, "--json"), (a.csv, "--csv")])  # both "-": refused
    distinct_outputs([(a.json, "--json"), (a.csv, "--csv")])
    reads = store_read(a.store)
    check_output_path(a.json, "--json", reads)
    check_output_path(a.csv, "--csv", reads)
    from ..core.documents import export_document
    from ..jobs.saved import stored_explorations
    from ..jobs.stores import existing
    from ..report.export import rows_to_csv

    path = existing(a.store)
    exps = stored_explorations(path, a.gpu, a.cudnn)  # StoreError: exit 3, naming the file
    if not exps:
        raise UserError(f"export: the results store '{path}' holds no exploration")
    if a.json:
        write_output(export_document(exps, os.path.abspath(path)), a.json, "--json")
    if a.csv:
        parts = [rows_to_csv(e) for e in exps]
        text = parts[0] + "".join(t.split("\n", 1)[1] for t in parts[1:])
        write_output(text, a.csv, "--csv")
    print(f"exported {len(exps)} stored explorations", file=sys.stderr)
    return 0
