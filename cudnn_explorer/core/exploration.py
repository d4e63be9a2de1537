"""One exploration: a problem, the environment it ran in, how it was measured, and its
directions; the ``cudnn_explorer.exploration`` schema (version 6; versions 1 to 5 still
load, see core/records.py). Pure Python (no torch import).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from .errors import UserError
from .problem import ConvProblem
from .records import DirectionResult
from .schema import Record, check_schema, convert, shown

__all__ = ["SCHEMA_NAME", "SCHEMA_VERSION", "Environment", "Measurement", "Exploration",
           "check_env_filters",
           "ChildWall", "cudnn_version"]

SCHEMA_NAME = "cudnn_explorer.exploration"
SCHEMA_VERSION = 6


def cudnn_version(v: str) -> str:
    """cuDNN integer version "91900" -> "9.19.0" (unchanged if not an integer)."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v)
    if n >= 90000:  # cuDNN 9: major*10000 + minor*100 + patch
        return f"{n // 10000}.{n % 10000 // 100}.{n % 100}"
    return f"{n // 1000}.{n % 1000 // 100}.{n % 100}"  # cuDNN <= 8


@dataclass(frozen=True)
class ChildWall(Record):
    """Where one of PyTorch's fresh processes spent its wall time (s): waiting for it to
    be ready (its imports, when it was started ahead), its run from its go to its end,
    and the phases of that run the child measured itself (measure/problem_child.py)."""

    label: str
    ready_wait_s: Optional[float] = None
    run_s: Optional[float] = None
    phases_s: Dict[str, float] = field(default_factory=dict)


@dataclass
class Environment(Record):
    """Where the numbers were measured. Versions are cuDNN-style integers as strings
    (e.g. cuDNN 91900 = 9.19.0; CUDA 13000 = 13.0)."""

    gpu_name: str = ""
    compute_capability: str = ""
    device_index: int = 0
    sm_count: Optional[int] = None  # streaming multiprocessors (None: files before it)
    torch_version: str = ""
    torch_cuda: str = ""
    cudnn_torch: str = ""        # torch.backends.cudnn.version()
    cudnn_runtime: str = ""      # cudnnGetVersion() in our extension
    cudnn_built: str = ""        # CUDNN_VERSION the extension was compiled against
    torch_built: str = ""        # torch the extension was compiled against
    cuda_runtime: str = ""
    cuda_driver: str = ""
    cudnn_frontend: str = ""     # the cudnn-frontend headers the extension was built with
    hostname: str = ""
    extra: Dict[str, str] = field(default_factory=dict)

    def matches(self, gpus=(), cudnns=()) -> bool:
        """Whether this environment passes the filters: a part of the GPU name (any of
        ``gpus``, case-insensitive) and a cuDNN version (any of ``cudnns``, as 9.19.0 or
        91900); an empty filter passes all."""
        gpus, cudnns = _texts(gpus, "gpus"), _texts(cudnns, "cudnns")
        if gpus and not any(g.lower() in self.gpu_name.lower() for g in gpus):
            return False
        want = {c.strip() for c in cudnns}
        return not want or self.cudnn_runtime in want or cudnn_version(self.cudnn_runtime) \
            in want


def _texts(values, name: str) -> tuple:
    """A filter as given: one text, or a list of texts (UserError otherwise)."""
    if isinstance(values, str):
        return (values,)
    if not hasattr(values, "__iter__") or not all(isinstance(v, str) for v in values):
        raise UserError(f"{name} {shown(values)}: valid: a list of texts, e.g. ['H200']")
    return tuple(values)


def check_env_filters(envs, gpus, cudnns, what: str) -> None:
    """UserError naming the filters (--gpu, --cudnn) when they leave none of ``envs``
    (Environments), and the environments there are; nothing when ``envs`` is empty or
    one passes."""
    if not envs or any(e.matches(gpus, cudnns) for e in envs):
        return
    given = ", ".join([f"GPU '{g}'" for g in _listed(gpus)]
                      + [f"cuDNN '{c}'" for c in _listed(cudnns)])
    there = sorted({f"{e.gpu_name} (cuDNN {cudnn_version(e.cudnn_runtime)})" for e in envs})
    raise UserError(f"{what}: no result matches the filters {given}; valid: a part of a GPU "
                    f"name or a cuDNN version of those there: {', '.join(there)}")


def _listed(values) -> List[str]:
    return [] if values is None else [values] if isinstance(values, str) else list(values)


@dataclass
class Measurement(Record):
    """How the rows were re-timed and checked (None fields: not done). ``options``: the
    ExploreOptions of the run, applied unchanged to legacy rows, engine configs and
    PyTorch's children; ``method``: the timing method they ask for ("graph", "eager" or
    "eager+flush"); each row's Timing says the method it really got."""

    retimed: bool = False
    budget_ms: Optional[float] = None  # sampling budget per row
    flush_l2: bool = False
    graph: bool = True
    method: str = ""
    eager_budget_ms: Optional[float] = None  # sampling budget of the eager wall-clock loop
    options: Dict[str, object] = field(default_factory=dict)
    reference: str = ""                # what the outputs were checked against
    peak_source: str = ""
    bandwidth_gbs: Optional[float] = None


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
    measurement: Measurement = field(default_factory=Measurement)
    # False: interrupted (``directions`` are those that finished), or a direction did not
    # finish (its ``error`` says what is missing and why)
    complete: bool = True
    # wall time (s): PyTorch's fresh processes (every mode), the whole exploration (its
    # setup included: the processes started ahead, torch imported and CUDA started where
    # not yet, the environment read), and that setup
    pytorch_wall_s: Optional[float] = None
    wall_s: Optional[float] = None
    pytorch_children: List[ChildWall] = field(default_factory=list)  # each mode's process
    setup_s: Optional[float] = None

    def direction(self, name: str) -> DirectionResult:
        for d in self.directions:
            if d.direction == name:
                return d
        raise KeyError(f"{name!r}: not measured here; measured: "
                       f"{', '.join(d.direction for d in self.directions) or 'none'}")

    def to_dict(self) -> dict:
        return {
            "schema": self.schema,
            "schema_version": self.schema_version,
            "tool_version": self.tool_version,
            "created": self.created,
            "problem": self.problem.to_dict(),
            "environment": asdict(self.environment),
            "measurement": asdict(self.measurement),
            "directions": [d.to_dict() for d in self.directions],
            **({} if self.complete else {"complete": False}),
            **{k: v for k, v in (("pytorch_wall_s", self.pytorch_wall_s),
                                 ("wall_s", self.wall_s), ("setup_s", self.setup_s))
               if v is not None},
            **({"pytorch_children": [c.to_dict() for c in self.pytorch_children]}
               if self.pytorch_children else {}),
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, d: dict) -> "Exploration":
        """A saved exploration, every field checked: UserError names the first bad one
        (its path, e.g. ``directions[0].find[2].timing.median_ms``) and what is valid."""
        version = check_schema(d, SCHEMA_NAME, range(1, SCHEMA_VERSION + 1), "result")
        directions = d.get("directions")
        if not isinstance(directions, list) or not directions:
            raise UserError(f"directions: {shown(directions)} is not a non-empty list")
        loaded = [DirectionResult.from_dict(x, f"directions[{i}]")
                  for i, x in enumerate(directions)]
        names = [x.direction for x in loaded]
        if len(set(names)) != len(names):
            raise UserError(f"directions: {', '.join(names)} lists a direction twice")
        for key in ("tool_version", "created"):
            convert(d.get(key, ""), str, key)
        complete = convert(d.get("complete", True), bool, "complete")
        walls = {k: None if d.get(k) is None else convert(d[k], float, k)
                 for k in ("pytorch_wall_s", "wall_s", "setup_s")}
        children = d.get("pytorch_children", [])
        if not isinstance(children, list):
            raise UserError(f"pytorch_children: {shown(children)} is not a list")
        walls["pytorch_children"] = [ChildWall.from_dict(c, f"pytorch_children[{i}]")
                                     for i, c in enumerate(children)]
        return cls(
            problem=ConvProblem.from_dict(d.get("problem")),
            environment=Environment.from_dict(d.get("environment") or {}, "environment"),
            directions=loaded,
            tool_version=d.get("tool_version", ""),
            created=d.get("created", ""),
            schema=d["schema"],
            schema_version=version,
            measurement=Measurement.from_dict(d.get("measurement") or {}, "measurement"),
            complete=complete, **walls,
        )

    @classmethod
    def from_json(cls, text) -> "Exploration":
        """From the text (or bytes) of a saved --json file; UserError when it is not one."""
        if isinstance(text, (bytes, bytearray)):
            try:
                text = bytes(text).decode("utf-8-sig")
            except UnicodeDecodeError as e:
                raise UserError(f"not a text file: byte {e.start} is not UTF-8") from None
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"not valid JSON: {e}") from None
        except RecursionError:
            raise UserError("not a cudnn_explorer result: nested too deeply") from None
        except TypeError:
            raise UserError(f"expected a saved file's text, got a {type(text).__name__}") \
                from None
        except ValueError as e:  # an integer too long to read
            raise UserError(f"not valid JSON: {str(e)[:80]}") from None
        if not isinstance(data, dict):
            raise UserError("not a cudnn_explorer result: top level is not an object")
        return cls.from_dict(data)
