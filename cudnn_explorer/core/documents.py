"""The saved documents that hold other records: an export of many explorations, the
heuristic rankings of ``--target`` and ``model --target``, and the sniffing that tells a
user which command reads a file of another kind. Pure Python (no torch import).
"""
from __future__ import annotations

import json
from typing import List, Optional, Sequence, Tuple

from .advice import ADVICE_SCHEMA
from .plans import PLANS_SCHEMA
from .capture import CAPTURE_SCHEMA, Capture
from .errors import UserError
from .exploration import Exploration
from .files import read_bytes
from .problem import ConvProblem
from .model_sweep import SWEEP_SCHEMA, ModelSweep

__all__ = ["EXPORT_SCHEMA", "TARGETS_SCHEMA", "MODEL_TARGETS_SCHEMA", "export_document",
           "targets_document", "model_targets_document", "kind_hint", "saved_schema",
           "load_exploration",
           "read_saved", "saved_explorations"]

EXPORT_SCHEMA = "cudnn_explorer.export"
TARGETS_SCHEMA = "cudnn_explorer.targets"
MODEL_TARGETS_SCHEMA = "cudnn_explorer.model_targets"
HEURISTIC = "heuristic, not measured"


def _json(doc: dict) -> str:
    return json.dumps(doc, indent=1) + "\n"


def export_document(explorations: Sequence[Exploration], store_path: str) -> str:
    """The ``export --json`` file: every exploration of the store at ``store_path``."""
    return _json({"schema": EXPORT_SCHEMA, "schema_version": 1, "store": store_path,
                  "explorations": [e.to_dict() for e in explorations]})


def targets_document(problem: ConvProblem, rankings, cudnn: str,
                     benchmark_limit: Optional[int]) -> str:
    """The ``--target --json`` file: one problem's heuristic rankings per target GPU."""
    return _json({"schema": TARGETS_SCHEMA, "schema_version": 1, "cudnn": cudnn,
                  "kind": HEURISTIC, "problem": problem.to_dict(),
                  "benchmark_limit": benchmark_limit,
                  "rankings": [r.to_dict() for r in rankings]})


def model_targets_document(capture: Capture, rankings, cudnn: str) -> str:
    """The ``model --target --json`` file: per unique problem, its rankings per target."""
    return _json({"schema": MODEL_TARGETS_SCHEMA, "schema_version": 1, "kind": HEURISTIC,
                  "cudnn": cudnn, "capture": capture.to_dict(),
                  "rankings": [[r.to_dict() for r in rs] for rs in rankings]})


_OTHER_KINDS = {
    "cudnn_explorer.exploration": "one problem's result: render it with '--load FILE', "
                                  "plot it with 'plot pareto FILE'",
    SWEEP_SCHEMA: "a model sweep: render it with 'model --load FILE', plot it with "
                  "'plot gaps FILE', compare it with 'compare --file FILE'",
    ADVICE_SCHEMA: "an advice: render it with 'advise --load FILE'",
    CAPTURE_SCHEMA: "a model's capture: its problems, not measured",
    PLANS_SCHEMA: "a plan file: show it with 'plans show FILE'",
    EXPORT_SCHEMA: "an export of the results store: compare it with 'compare --file FILE'",
    TARGETS_SCHEMA: "--target's heuristic rankings, not measured: nothing renders them",
    MODEL_TARGETS_SCHEMA: "model --target's heuristic rankings, not measured: nothing "
                          "renders them",
}
# files without a schema that the tool's scripts and processes write, by their keys
_UNNAMED_KINDS = [
    ({"wall_s", "rows"}, "a staged search compared with a full one, per problem: the data "
                         "behind docs/benchmarks.md's 'The same answers'"),
    ({"torch", "cudnn", "settings", "directions"}, "a PyTorch child process's raw result "
                                                   "(measure/problem_child.py), which the "
                                                   "tool reads itself"),
]


def saved_schema(path: str) -> Optional[str]:
    """The ``schema`` a saved file (JSON, or gzip-compressed JSON) names, or None where it
    names none or cannot be read (its reader then says why)."""
    try:
        doc = json.loads(read_bytes(path, "file"))
    except (UserError, ValueError, RecursionError):
        return None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    return schema if isinstance(schema, str) else None


def kind_hint(data: bytes, expected: str = "") -> str:
    """" (<what the file is and what reads it>)" for a saved file of another kind than
    ``expected`` (a schema name), else ""."""
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        return ""
    if not isinstance(doc, dict):
        return ""
    schema = doc.get("schema")
    if isinstance(schema, str):
        hint = _OTHER_KINDS.get(schema) if schema != expected else None
    else:
        hint = next((h for keys, h in _UNNAMED_KINDS if keys <= set(doc)), None)
    return f" ({hint})" if hint else ""


def load_exploration(path: str, flag: str = "--load") -> Exploration:
    """The Exploration saved at ``path``; UserError naming the file and the bad field."""
    data = read_bytes(path, flag)
    try:
        return Exploration.from_json(data)
    except UserError as e:
        raise UserError(f"{flag} '{path}': {e}"
                        f"{kind_hint(data, 'cudnn_explorer.exploration')}") from None


def read_saved(path: str, flag: str) -> Tuple[Optional[ModelSweep], List[Exploration]]:
    """(the model sweep, when the file is one; the explorations it holds) of a saved
    file: one result (--json), an export of many, or a model sweep (one per unique
    problem measured). UserError naming the file and the bad field."""
    data = read_bytes(path, flag)
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError):
        doc = None
    try:
        if isinstance(doc, dict) and doc.get("schema") == EXPORT_SCHEMA:
            return None, [Exploration.from_dict(e) for e in doc.get("explorations") or []]
        if isinstance(doc, dict) and doc.get("schema") == SWEEP_SCHEMA:
            sw = ModelSweep.from_dict(doc)
            return sw, [e.exploration for e in sw.entries if e.exploration is not None]
        return None, [Exploration.from_json(data)]
    except UserError as e:
        read = doc.get("schema") if isinstance(doc, dict) and doc.get("schema") in (
            EXPORT_SCHEMA, SWEEP_SCHEMA) else "cudnn_explorer.exploration"  # what failed
        raise UserError(f"{flag} '{path}': {e}{kind_hint(data, read)}") from None


def saved_explorations(path: str, flag: str) -> List[Exploration]:
    """The explorations of a saved file (read_saved)."""
    return read_saved(path, flag)[1]
