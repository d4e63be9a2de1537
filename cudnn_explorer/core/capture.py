"""Records of a model's convolutions as cuDNN sees them: the unique problems of one
training or inference iteration, with their layers and call counts. Pure Python.

Schema ``cudnn_explorer.capture``, version 1. Built once by ``model/capture.py`` (which
runs the model under a TorchDispatchMode) and rendered by ``report/model.py``.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional

from .errors import UserError
from .problem import DIRECTIONS, ConvProblem
from .records import _Record, _shown

__all__ = ["CAPTURE_SCHEMA", "CAPTURE_VERSION", "UniqueConv", "Uncovered", "ModelSpec",
           "Capture"]

CAPTURE_SCHEMA = "cudnn_explorer.capture"
CAPTURE_VERSION = 1


@dataclass
class UniqueConv(_Record):
    """One problem as PyTorch's convolution cache keys it (sizes, layout, dtype, padding,
    stride, dilation, groups, TF32), with ``calls``: per direction ("fwd", "bwd-data",
    "bwd-filter"), how many times one iteration runs it, and ``layers``: the modules that
    run it (fully qualified names, first seen first)."""

    problem: ConvProblem
    calls: Dict[str, int] = field(default_factory=dict)
    layers: List[str] = field(default_factory=list)

    @property
    def directions(self) -> List[str]:
        return [d for d in DIRECTIONS if self.calls.get(d)]

    def to_dict(self) -> dict:
        return {"problem": self.problem.to_dict(), "calls": dict(self.calls),
                "layers": list(self.layers)}


@dataclass
class Uncovered(_Record):
    """A convolution the tool does not explore (a transposed one, or a dtype cuDNN's
    convolution does not take), listed so that nothing is dropped silently."""

    layer: str
    why: str
    input_shape: List[int] = field(default_factory=list)
    weight_shape: List[int] = field(default_factory=list)
    dtype: str = ""
    calls: int = 0


@dataclass
class ModelSpec(_Record):
    """Which model ran and how: ``name`` (torchvision) or ``factory`` ("pkg.mod:fn"),
    ``input_shape`` per sample (C, H, W), ``batch``, ``amp`` ("off", "fp16", "bf16"),
    ``channels_last``, ``train`` (forward and backward) or inference."""

    name: str = ""
    factory: str = ""
    input_shape: List[int] = field(default_factory=list)
    batch: int = 1
    amp: str = "off"
    channels_last: bool = False
    train: bool = True

    def describe(self) -> str:
        what = self.name or self.factory
        mode = "training step (forward + backward)" if self.train else "inference (forward)"
        amp = {"off": "no AMP", "fp16": "AMP float16", "bf16": "AMP bfloat16"}[self.amp]
        layout = "channels_last" if self.channels_last else "contiguous"
        shape = "x".join(map(str, [self.batch] + list(self.input_shape)))
        return f"{what}, input {shape}, {mode}, {amp}, {layout}"


@dataclass
class Capture(_Record):
    """Every convolution one iteration of a model ran: unique problems (first seen first),
    what was not covered, and the settings they were captured under (``tf32``,
    ``deterministic``: torch.backends.cudnn's flags; ``device``)."""

    model: ModelSpec
    problems: List[UniqueConv] = field(default_factory=list)
    uncovered: List[Uncovered] = field(default_factory=list)
    conv_calls: int = 0            # convolution calls of one iteration, all directions
    tf32: bool = True
    deterministic: bool = False
    device: str = ""
    seconds: Optional[float] = None  # wall time of the capture
    schema: str = CAPTURE_SCHEMA
    schema_version: int = CAPTURE_VERSION

    def to_dict(self) -> dict:
        d = asdict(self)
        d["problems"] = [p.to_dict() for p in self.problems]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json_dict(cls, d: dict) -> "Capture":
        if not isinstance(d, dict) or d.get("schema") != CAPTURE_SCHEMA:
            raise UserError(f"not a cudnn_explorer capture: schema is "
                            f"{_shown(d.get('schema') if isinstance(d, dict) else d)}")
        if d.get("schema_version") != CAPTURE_VERSION:
            raise UserError(f"capture schema_version {_shown(d.get('schema_version'))}: "
                            f"this cudnn_explorer reads version {CAPTURE_VERSION}")
        return cls.from_dict(d)
