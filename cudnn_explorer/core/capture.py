"""Records of a model's convolutions as cuDNN sees them: the unique problems of one
training or inference iteration, with their layers and call counts. Pure Python.

Schema ``cudnn_explorer.capture``, version 1. Built once by ``model/tracer.py`` (which
runs the model under a TorchDispatchMode) and rendered by ``report/model.py``.
"""
from __future__ import annotations

import inspect
import itertools
import json
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, List, Optional

from .errors import UserError
from .options import flag
from .problem import DIRECTIONS, ConvProblem
from .schema import Record, check_schema, shown

__all__ = ["CAPTURE_SCHEMA", "CAPTURE_VERSION", "UniqueConv", "Uncovered", "ModelSpec",
           "SizeCapture", "Capture", "merge_sizes", "add_counts"]

CAPTURE_SCHEMA = "cudnn_explorer.capture"
CAPTURE_VERSION = 1


@dataclass
class UniqueConv(Record):
    """One problem as PyTorch's convolution cache keys it (sizes, layout, dtype, padding,
    stride, dilation, groups, TF32), with ``calls``: per direction ("fwd", "bwd-data",
    "bwd-filter"), how many times one iteration runs it, and ``layers``: the modules that
    run it (fully qualified names, first seen first). ``transposed_calls``: of ``calls``,
    those of transposed convolutions, which PyTorch runs as this problem (its forward as
    this problem's backward-data, in the forward pass; Note [transposed] in
    model/tracer.py)."""

    problem: ConvProblem
    calls: Dict[str, int] = field(default_factory=dict)
    layers: List[str] = field(default_factory=list)
    transposed_calls: Dict[str, int] = field(default_factory=dict)

    @property
    def directions(self) -> List[str]:
        return [d for d in DIRECTIONS if self.calls.get(d)]

    def passes(self, direction: str) -> List[str]:
        """The passes ("forward", "backward") whose calls run ``direction``: each has a
        plan cache of its own (PyTorch's caches are per thread, and the autograd engine
        runs the backward pass on a thread of its own)."""
        t = self.transposed_calls.get(direction, 0)
        own = self.calls.get(direction, 0) - t
        normal = "forward" if direction == "fwd" else "backward"
        mapped = "forward" if direction == "bwd-data" else "backward"
        return [p for p in ("forward", "backward")
                if (own > 0 and p == normal) or (t > 0 and p == mapped)]

    def to_dict(self) -> dict:
        d = {"problem": self.problem.to_dict(), "calls": dict(self.calls),
             "layers": list(self.layers)}
        if self.transposed_calls:
            d["transposed_calls"] = dict(self.transposed_calls)
        return d


@dataclass
class Uncovered(Record):
    """A convolution the tool does not explore (a transposed one, or a dtype cuDNN's
    convolution does not take), listed so that nothing is dropped silently."""

    layer: str
    why: str
    input_shape: List[int] = field(default_factory=list)
    weight_shape: List[int] = field(default_factory=list)
    dtype: str = ""
    calls: int = 0


AMP_MODES = ("off", "fp16", "bf16")
_FLAGS = {"model": "--model", "amp": "--amp", "batch": "--batch", "input_shape": "--input",
          "sizes": "--sizes", "model_args": "--model-args", "inputs": "--inputs"}


@dataclass
class ModelSpec(Record):
    """Which model ran and how: ``name`` (torchvision, or "timm:NAME") or ``factory``
    ("pkg.mod:fn", called with ``model_args`` as keywords), ``inputs`` ("pkg.mod:fn", the
    user's own inputs: fn(batch, input_shape, device) returns a tensor, a tuple of
    positional arguments or a dict of keyword arguments),
    ``input_shape`` per sample (C, H, W), ``batch``, ``amp`` ("off", "fp16", "bf16"),
    ``channels_last``, ``train`` (forward and backward) or inference."""

    name: str = ""
    factory: str = ""
    input_shape: List[int] = field(default_factory=list)
    batch: int = 1
    amp: str = "off"
    channels_last: bool = False
    train: bool = True

    sizes: List[int] = field(default_factory=list)  # --sizes: input sizes, in order
    model_args: Dict[str, object] = field(default_factory=dict)  # --model-args (JSON)
    inputs: str = ""  # --inputs pkg.mod:fn

    @classmethod
    def of(cls, model, **kw) -> "ModelSpec":
        """``model`` as a ModelSpec: one already built (then no keywords), or a torchvision
        name or "pkg.module:factory" with create's keywords (batch, input_shape, sizes,
        amp, channels_last, train, model_args, inputs); UserError naming an unknown one."""
        if isinstance(model, ModelSpec):
            if kw:
                raise UserError(f"pass either a ModelSpec or keywords, not both "
                                f"({', '.join(kw)})")
            return model
        valid = [p for p in inspect.signature(cls.create).parameters
                 if p not in ("model", "source")]
        unknown = sorted(set(kw) - set(valid))
        if unknown:
            raise UserError(f"{unknown[0]}: not a model keyword; valid: {', '.join(valid)}")
        return cls.create(model, **kw)

    @classmethod
    def from_dict(cls, d: dict, path: str = "") -> "ModelSpec":
        """As Record reads it, and ``amp`` one that the model's run knows."""
        spec = super().from_dict(d, path)
        if spec.amp not in AMP_MODES:
            raise UserError(f"{path or cls.__name__}.amp {shown(spec.amp)}: valid: "
                            f"{', '.join(AMP_MODES)}")
        return spec

    def to_dict(self) -> dict:
        """As saved; the optional fields only when set (specs saved before them, and the
        store's keys of runs made from them, stay the same)."""
        d = asdict(self)
        for k in ("model_args", "inputs"):
            if not d[k]:
                del d[k]
        return d

    @classmethod
    def create(cls, model: str, batch=32, input_shape=(3, 224, 224), sizes=None,
               amp: str = "off", channels_last: bool = False, train: bool = True,
               source: str = "api", model_args=None, inputs: str = "") -> "ModelSpec":
        """A spec from values, validated: ``model`` a torchvision name or
        "pkg.module:factory" (a function that takes no arguments); ``input_shape`` one
        sample's (C x L, C x H x W or C x D x H x W); ``sizes``: variable input sizes, the
        input's height and width (its length in 1-D) set to each. UserError naming the
        parameter (``source="api"``) or the flag (``source="cli"``) and what is valid."""
        def name(param: str) -> str:
            return _FLAGS.get(param, param) if source == "cli" else param

        if not isinstance(model, str) or not model.strip():
            raise UserError(f"{name('model')} {shown(model)}: valid: a torchvision model "
                            f"name or pkg.module:factory")
        amp_ = str(amp).strip().lower()
        if amp_ not in AMP_MODES:
            raise UserError(f"{name('amp')} '{amp}': valid: {', '.join(AMP_MODES)}")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 1 << 20:
            raise UserError(f"{name('batch')} {shown(batch)}: valid: an integer from 1 to "
                            f"1048576")
        shape = list(input_shape)
        if len(shape) not in (2, 3, 4) or not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in shape):
            raise UserError(f"{name('input_shape')} {shown(shape)}: valid: C x L, C x H x W "
                            f"or C x D x H x W, each an integer >= 1")
        factory = ":" in model and not model.startswith("timm:")
        if model_args is not None and not (isinstance(model_args, dict) and all(
                isinstance(k, str) for k in model_args)):
            raise UserError(f"{name('model_args')} {shown(model_args)}: valid: an object of "
                            f"keyword arguments")
        if inputs and (not isinstance(inputs, str) or ":" not in inputs):
            raise UserError(f"{name('inputs')} {shown(inputs)}: valid: pkg.module:function")
        spec = cls(name="" if factory else model, factory=model if factory else "",
                   input_shape=shape, batch=batch, amp=amp_,
                   channels_last=flag(channels_last, name("channels_last")),
                   train=flag(train, name("train")), model_args=dict(model_args or {}),
                   inputs=inputs or "")
        if sizes is None:
            return spec
        valid = "valid: 1 to 256 different sizes, each an integer from 1 to 65536"
        try:  # at most one past the limit: a huge range is never made a list
            sizes = list(itertools.islice(iter(sizes), 257))
        except TypeError:
            raise UserError(f"{name('sizes')} {shown(sizes)}: {valid}") from None
        if not sizes:
            return spec
        if (not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65536
                    for v in sizes) or len(sizes) > 256 or len(set(sizes)) != len(sizes)):
            raise UserError(f"{name('sizes')} {shown(sizes)}: {valid}")
        return spec.over_sizes(sizes)

    def shape_at(self, size) -> List:
        """``input_shape`` at input size ``size`` (--sizes): its height and width set to it
        (C x S x S, C x D x S x S), or its length (C x S) for a 1-D input."""
        shape = list(self.input_shape)
        k = 1 if len(shape) <= 2 else 2
        return shape[:len(shape) - k] + [size] * k

    def at_size(self, size: int) -> "ModelSpec":
        """The spec of one input size of ``sizes``."""
        return replace(self, input_shape=self.shape_at(size), sizes=[])

    def over_sizes(self, sizes: List[int]) -> "ModelSpec":
        """This spec over input sizes ``sizes``; its input shape is the first's."""
        return replace(self, input_shape=self.shape_at(sizes[0]), sizes=list(sizes))

    def describe(self) -> str:
        what = self.name or self.factory
        if self.model_args:
            what += "(" + ", ".join(f"{k}={json.dumps(v)}" for k, v in self.model_args.items()) \
                + ")"
        if self.inputs:
            what += f", inputs from {self.inputs}"
        mode = "training step (forward + backward)" if self.train else "inference (forward)"
        amp = {"off": "no AMP", "fp16": "AMP float16", "bf16": "AMP bfloat16"}[self.amp]
        layout = "channels_last" if self.channels_last else "contiguous"
        shape = "x".join(map(str, [self.batch] + list(self.input_shape)))
        if self.sizes:
            shape = (f"{'x'.join(map(str, [self.batch] + self.shape_at('S')))} for S in "
                     f"{', '.join(map(str, self.sizes))}")
        return f"{what}, input {shape}, {mode}, {amp}, {layout}"


@dataclass
class SizeCapture(Record):
    """One input size of a capture over several (``--sizes``): its convolution calls, the
    unique problems it runs (indices into Capture.problems) and those it is the first to
    run: each new problem costs PyTorch a first call (a benchmark search when benchmark
    mode is on) in every process."""

    size: int
    conv_calls: int = 0
    problems: List[int] = field(default_factory=list)
    new: List[int] = field(default_factory=list)


@dataclass
class Capture(Record):
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
    sizes: List[SizeCapture] = field(default_factory=list)  # --sizes: one per input size
    schema: str = CAPTURE_SCHEMA
    schema_version: int = CAPTURE_VERSION

    def to_dict(self) -> dict:
        d = asdict(self)
        d["model"] = self.model.to_dict()
        d["problems"] = [p.to_dict() for p in self.problems]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_json_dict(cls, d: dict) -> "Capture":
        check_schema(d, CAPTURE_SCHEMA, (CAPTURE_VERSION,), "capture")
        return cls.from_dict(d)


def add_counts(into: Dict[str, int], counts: Dict[str, int]) -> None:
    """Add ``counts`` (calls per direction) into ``into``."""
    for d, n in counts.items():
        into[d] = into.get(d, 0) + n


def merge_sizes(captures: List[Capture], sizes: List[int], spec: ModelSpec) -> Capture:
    """One capture of a model run at several input sizes: the union of their unique
    problems (first seen first), calls summed (one iteration at each size), and per size
    which problems it runs and which it is the first to run. The sums are kept apart
    and each record is built once, from them."""
    index: Dict[ConvProblem, int] = {}
    sums: List[tuple] = []  # per problem: (problem, calls, transposed calls, layers)
    uncovered: Dict[tuple, list] = {}  # key -> [the first seen, calls summed]
    per_size = []
    for size, cap in zip(sizes, captures):
        used, new = [], []
        for u in cap.problems:
            if u.problem not in index:
                index[u.problem] = len(sums)
                sums.append((u.problem, {}, {}, []))
                new.append(index[u.problem])
            _, calls, transposed, layers = sums[index[u.problem]]
            add_counts(calls, u.calls)
            add_counts(transposed, u.transposed_calls)
            layers += [x for x in u.layers if x not in layers]
            used.append(index[u.problem])
        for x in cap.uncovered:
            key = (x.layer, x.why, tuple(x.input_shape), tuple(x.weight_shape))
            uncovered.setdefault(key, [x, 0])[1] += x.calls
        per_size.append(SizeCapture(size=size, conv_calls=cap.conv_calls, problems=used,
                                    new=new))
    problems = [UniqueConv(problem=p, calls=c, layers=ls, transposed_calls=t)
                for p, c, t, ls in sums]
    kept = [replace(x, calls=n) for x, n in uncovered.values()]
    first = captures[0]
    return Capture(model=spec, problems=problems, uncovered=kept,
                   conv_calls=sum(c.conv_calls for c in captures), tf32=first.tf32,
                   deterministic=first.deterministic, device=first.device,
                   seconds=sum(c.seconds or 0.0 for c in captures), sizes=per_size)
