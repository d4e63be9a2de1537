"""Result records, their JSON schema and CSV form. Pure Python (no torch import).

Schema ``cudnn_explorer.exploration``, version 1 (see README, "Output schema").
Readers ignore keys they do not know and fill absent optional keys with None, so
later versions can add fields (re-timed measurements, PyTorch's choice, engine
configs, whole models) without breaking saved files.
"""
from __future__ import annotations

import csv
import io
import json
from dataclasses import asdict, dataclass, field, fields
from typing import Dict, List, Optional

from .errors import UserError
from .problem import ConvProblem

__all__ = [
    "SCHEMA_NAME",
    "SCHEMA_VERSION",
    "AlgoResult",
    "WorkspaceEntry",
    "DirectionResult",
    "Environment",
    "Exploration",
    "MIB",
    "CSV_COLUMNS",
    "rows_to_csv",
    "rows_from_csv",
]

SCHEMA_NAME = "cudnn_explorer.exploration"
SCHEMA_VERSION = 1
MIB = 1024 * 1024
SUCCESS = "CUDNN_STATUS_SUCCESS"
DIRECTION_TITLES = {
    "fwd": "forward",
    "bwd-data": "backward-data",
    "bwd-filter": "backward-filter",
}
FIND_CALLS = {
    "fwd": "cudnnFindConvolutionForwardAlgorithmEx",
    "bwd-data": "cudnnFindConvolutionBackwardDataAlgorithmEx",
    "bwd-filter": "cudnnFindConvolutionBackwardFilterAlgorithmEx",
}


def _known(cls, d: dict) -> dict:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in d.items() if k in names}


@dataclass
class AlgoResult:
    """One (algorithm, math type) row from cudnnFind*Ex or cudnnGet*_v7.

    ``time_ms``: cudnnFind's own single measurement in milliseconds (None for heuristic
    rows and for rows that did not run). ``workspace_bytes``: the workspace the row
    reports. ``status``: cuDNN's status name. ``note``: why a row did not run, when we
    know (e.g. it needs more workspace than it was given).
    """

    algo: int
    algo_name: str
    math_type: str
    status: str
    status_code: int
    time_ms: Optional[float]
    workspace_bytes: int
    deterministic: bool
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == SUCCESS

    @property
    def key(self):
        return (self.algo, self.math_type)

    @classmethod
    def from_dict(cls, d: dict) -> "AlgoResult":
        return cls(**_known(cls, d))


@dataclass
class WorkspaceEntry:
    """cudnnGet*WorkspaceSize for one (algorithm, math type); bytes None if it failed."""

    algo: int
    algo_name: str
    math_type: str
    status: str
    bytes: Optional[int]

    @classmethod
    def from_dict(cls, d: dict) -> "WorkspaceEntry":
        return cls(**_known(cls, d))


@dataclass
class DirectionResult:
    """Everything the legacy API says about one direction of the problem."""

    direction: str                   # fwd | bwd-data | bwd-filter
    math_type: str                   # the descriptor's math type during Find
    find: List[AlgoResult]           # in cuDNN's order (fastest first)
    heuristics: List[AlgoResult]     # cudnnGet*_v7 order
    workspace: List[WorkspaceEntry]  # every (algorithm, math type)
    workspace_needed_bytes: int      # max over successful workspace queries
    workspace_given_bytes: int       # what Find was given
    workspace_cap_bytes: Optional[int] = None  # --max-workspace, if any
    find_requested: int = 0
    find_returned: int = 0

    def ranked(self) -> List[AlgoResult]:
        """Successful rows fastest first, then the rest in cuDNN's order."""
        ok = sorted((r for r in self.find if r.ok and r.time_ms is not None),
                    key=lambda r: r.time_ms)
        return ok + [r for r in self.find if not (r.ok and r.time_ms is not None)]

    def best(self) -> Optional[AlgoResult]:
        ranked = self.ranked()
        return ranked[0] if ranked and ranked[0].ok else None

    def heuristic_rank(self, row: AlgoResult) -> Optional[int]:
        for i, h in enumerate(self.heuristics, 1):
            if h.key == row.key:
                return i
        return None

    def workspace_for(self, algo: int, math_type: str) -> Optional[int]:
        for w in self.workspace:
            if w.algo == algo and w.math_type == math_type:
                return w.bytes
        return None

    def annotate(self) -> None:
        """Say so on rows that could not run for lack of workspace."""
        for r in self.find:
            if r.ok:
                continue
            need = self.workspace_for(r.algo, r.math_type)
            need = max(need or 0, r.workspace_bytes or 0)
            if need > self.workspace_given_bytes:
                why = " (--max-workspace)" if self.workspace_cap_bytes is not None else ""
                r.note = (f"needs {need / MIB:.2f} MiB workspace > "
                          f"{self.workspace_given_bytes / MIB:.2f} MiB given{why}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "DirectionResult":
        kw = _known(cls, d)
        kw["find"] = [AlgoResult.from_dict(r) for r in d.get("find", [])]
        kw["heuristics"] = [AlgoResult.from_dict(r) for r in d.get("heuristics", [])]
        kw["workspace"] = [WorkspaceEntry.from_dict(r) for r in d.get("workspace", [])]
        return cls(**kw)


@dataclass
class Environment:
    """Where the numbers were measured. Versions are cuDNN-style integers as strings
    (e.g. cuDNN 91900 = 9.19.0; CUDA 13000 = 13.0)."""

    gpu_name: str = ""
    compute_capability: str = ""
    device_index: int = 0
    torch_version: str = ""
    torch_cuda: str = ""
    cudnn_torch: str = ""        # torch.backends.cudnn.version()
    cudnn_runtime: str = ""      # cudnnGetVersion() in our extension
    cudnn_built: str = ""        # CUDNN_VERSION the extension was compiled against
    torch_built: str = ""        # torch the extension was compiled against
    cuda_runtime: str = ""
    cuda_driver: str = ""
    hostname: str = ""
    extra: Dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict) -> "Environment":
        return cls(**_known(cls, d))

    def describe(self) -> str:
        return (
            f"GPU {self.device_index}: {self.gpu_name} (compute capability "
            f"{self.compute_capability}); cuDNN {fmt_version(self.cudnn_runtime)} (torch "
            f"reports {fmt_version(self.cudnn_torch)}); torch {self.torch_version} "
            f"(CUDA {self.torch_cuda}); driver supports CUDA {fmt_cuda(self.cuda_driver)}"
        )


def fmt_version(v: str) -> str:
    """cuDNN integer version "91900" -> "9.19.0" (unchanged if not an integer)."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v)
    if n >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"  # cuDNN <= 8


def fmt_cuda(v: str) -> str:
    """CUDA integer version "13000" -> "13.0"."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{n // 1000}.{n % 1000 // 10}"


@dataclass
class Exploration:
    """A whole run: problem, environment and one DirectionResult per direction."""

    problem: ConvProblem
    environment: Environment
    directions: List[DirectionResult]
    tool_version: str = ""
    created: str = ""
    schema: str = SCHEMA_NAME
    schema_version: int = SCHEMA_VERSION

    def direction(self, name: str) -> DirectionResult:
        for d in self.directions:
            if d.direction == name:
                return d
        raise KeyError(name)

    def to_dict(self) -> dict:
        return {
            "schema": self.schema,
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "problem": self.problem.to_dict(),
            "environment": asdict(self.environment),
            "directions": [d.to_dict() for d in self.directions],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict) -> "Exploration":
        if d.get("schema") != SCHEMA_NAME:
            raise UserError(f"not a cudnn_explorer result: schema is {d.get('schema')!r}, "
                            f"expected {SCHEMA_NAME!r}")
        version = d.get("schema_version")
        if not isinstance(version, int) or version > SCHEMA_VERSION:
            raise UserError(
                f"schema_version {version!r} is newer than this cudnn_explorer reads "
                f"(<= {SCHEMA_VERSION}); upgrade cudnn_explorer"
            )
        return cls(
            problem=ConvProblem.from_dict(d["problem"]),
            environment=Environment.from_dict(d.get("environment", {})),
            directions=[DirectionResult.from_dict(x) for x in d.get("directions", [])],
            tool_version=d.get("tool_version", ""),
            created=d.get("created", ""),
            schema=d["schema"],
            schema_version=version,
        )

    @classmethod
    def from_json(cls, text: str) -> "Exploration":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise UserError("not a cudnn_explorer result: top level is not an object")
        return cls.from_dict(data)


# ---------------------------------------------------------------------- CSV
CSV_COLUMNS = [
    "schema_version", "direction", "rank", "best", "algo", "algo_name", "math_type", "status",
    "status_code", "time_ms", "workspace_bytes", "deterministic", "heuristic_rank", "note",
    "input_shape", "weight_shape", "output_shape", "padding", "stride", "dilation", "groups",
    "dtype", "layout", "tf32", "descriptor_math_type", "workspace_given_bytes", "gpu_name",
    "compute_capability", "cudnn_version", "torch_version",
]


def rows_to_csv(exp: Exploration) -> str:
    """One CSV row per Find result, ranked per direction, with the problem and the
    environment repeated on every row so that files can be concatenated."""
    p, e = exp.problem, exp.environment

    def x(t):
        return "x".join(map(str, t))

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for d in exp.directions:
        best = d.best()
        for rank, r in enumerate(d.ranked(), 1):
            hr = d.heuristic_rank(r)
            w.writerow({
                "schema_version": exp.schema_version, "direction": d.direction,
                "rank": rank if r.ok else "", "best": "yes" if r is best else "",
                "algo": r.algo, "algo_name": r.algo_name, "math_type": r.math_type,
                "status": r.status, "status_code": r.status_code,
                "time_ms": "" if r.time_ms is None else repr(r.time_ms),
                "workspace_bytes": r.workspace_bytes,
                "deterministic": "yes" if r.deterministic else "no",
                "heuristic_rank": "" if hr is None else hr, "note": r.note,
                "input_shape": x(p.input_shape), "weight_shape": x(p.weight_shape),
                "output_shape": x(p.output_shape), "padding": x(p.padding),
                "stride": x(p.stride), "dilation": x(p.dilation), "groups": p.groups,
                "dtype": p.dtype, "layout": p.layout,
                "tf32": "" if p.tf32 is None else ("on" if p.tf32 else "off"),
                "descriptor_math_type": d.math_type,
                "workspace_given_bytes": d.workspace_given_bytes, "gpu_name": e.gpu_name,
                "compute_capability": e.compute_capability, "cudnn_version": e.cudnn_runtime,
                "torch_version": e.torch_version,
            })
    return buf.getvalue()


def rows_from_csv(text: str) -> List[dict]:
    """Read rows_to_csv output back: each dict has the CSV columns, plus ``result``, the
    row as an AlgoResult."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("direction", "algo", "algo_name", "math_type", "status")
               if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"not a cudnn_explorer CSV: missing columns {', '.join(missing)}")
    out = []
    for row in reader:
        row = dict(row)
        row["result"] = AlgoResult(
            algo=int(row["algo"]), algo_name=row["algo_name"], math_type=row["math_type"],
            status=row["status"], status_code=int(row["status_code"]),
            time_ms=float(row["time_ms"]) if row["time_ms"] else None,
            workspace_bytes=int(row["workspace_bytes"]),
            deterministic=row["deterministic"] == "yes", note=row.get("note", ""),
        )
        out.append(row)
    return out
