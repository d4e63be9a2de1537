"""The convolution problem: parsing, validation, output-size math, math type.

Pure Python (no torch import): every rule here is testable without a GPU.
"""
from __future__ import annotations

import itertools
import math
import operator
from dataclasses import asdict, dataclass
from typing import Optional, Tuple

from .errors import UserError

__all__ = [
    "ConvProblem",
    "DIRECTIONS",
    "DTYPES",
    "LAYOUTS",
    "parse_int_list",
    "parse_dtype",
    "conv_output_size",
    "transposed_output_size",
    "per_dim",
    "output_shape",
    "clip",
]

DIRECTIONS = ("fwd", "bwd-data", "bwd-filter")
DTYPES = ("float32", "float16", "bfloat16", "float64")
LAYOUTS = ("nchw", "nhwc")
_DTYPE_ALIASES = {
    "float32": "float32", "fp32": "float32", "float": "float32",
    "float16": "float16", "fp16": "float16", "half": "float16",
    "bfloat16": "bfloat16", "bf16": "bfloat16",
    "float64": "float64", "fp64": "float64", "double": "float64",
}
_SPATIAL_NAMES = {1: ("L",), 2: ("H", "W"), 3: ("D", "H", "W")}
_SHAPE_FORMS = "N,C,L (1-D), N,C,H,W (2-D) or N,C,D,H,W (3-D)"


def clip(text: str, most: int = 40) -> str:
    """``text`` cut to ``most`` characters for an error message."""
    return text if len(text) <= most else text[:most - 3] + "..."


def told(value, most: int = 40) -> str:
    """``value`` as an error message shows it: its repr cut to ``most`` characters, an
    integer too long to print said by its size; never raises."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"<an integer of {value.bit_length()} bits>"
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001  (a value that cannot say itself)
        text = f"<a {type(value).__name__}>"
    return clip(text, most)


def parse_int_list(text: str, option: str) -> Tuple[int, ...]:
    """Parse "3" or "3,3" (also "3x3") into a tuple of ints; UserError otherwise."""
    if isinstance(text, int):
        return (text,)
    raw = str(text).strip()
    parts = [p.strip() for p in raw.replace("x", ",").split(",")] if raw else []
    if not parts or any(p == "" for p in parts):
        raise UserError(f"{option} '{clip(str(text))}': expected comma-separated integers, "
                        f"e.g. 3 or 3,3")
    out = []
    for p in parts:
        try:
            if not p.lstrip("+-").isdigit() or not p.isascii() or len(p) > 30:
                raise ValueError(p)
            out.append(int(p))
        except ValueError:
            raise UserError(
                f"{option} '{clip(str(text))}': '{clip(p)}' is not an integer; expected "
                f"comma-separated integers"
            ) from None
    return tuple(out)


def parse_dtype(text: str, option: str = "--dtype") -> str:
    """Canonical dtype name (float32, float16, bfloat16, float64) or UserError naming
    ``option``."""
    key = str(text).strip().lower().replace("torch.", "")
    if key not in _DTYPE_ALIASES:
        raise UserError(f"{option} '{text}': unknown dtype; valid: {', '.join(DTYPES)}")
    return _DTYPE_ALIASES[key]


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    """Output length of one spatial dim (PyTorch's and cuDNN's formula; may be <= 0)."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def transposed_output_size(size, kernel, stride, padding, dilation, output_padding):
    """Output length of one spatial dim of a transposed convolution (PyTorch's formula):
    the input length of the convolution it is the adjoint of. Plain arithmetic, so a
    symbolic size (torch.compile's) stays symbolic."""
    return (size - 1) * stride - 2 * padding + dilation * (kernel - 1) + output_padding + 1


def per_dim(values, n: int) -> list:
    """``values`` (one, or one per dim) as one per each of ``n`` spatial dims."""
    values = list(values)
    return values * n if len(values) == 1 else values


def output_shape(input_shape, weight_shape, stride, padding, dilation, groups: int,
                 transposed: bool = False, output_padding=(0,)) -> list:
    """[N, C, *spatial] of a convolution's output (of a transposed one with
    ``transposed``), as PyTorch computes it from the input's and the weight's shapes and
    the call's arguments (each one value, or one per spatial dim); sizes may be symbolic."""
    n = len(input_shape) - 2
    s, p, d = per_dim(stride, n), per_dim(padding, n), per_dim(dilation, n)
    k = list(weight_shape[2:])
    if transposed:
        o = per_dim(output_padding, n)
        return [input_shape[0], weight_shape[1] * groups,
                *[transposed_output_size(input_shape[2 + i], k[i], s[i], p[i], d[i], o[i])
                  for i in range(n)]]
    return [input_shape[0], weight_shape[0],
            *[conv_output_size(input_shape[2 + i], k[i], s[i], p[i], d[i]) for i in range(n)]]


INT32_MAX = 2**31 - 1  # cuDNN's tensor descriptors hold sizes and strides as int32


def _divisors(n: int):
    """The divisors of n, ascending (O(sqrt n))."""
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return small + [n // d for d in reversed(small) if d * d != n]


def _listed(values, most: int = 12) -> str:
    values = list(values)
    if len(values) <= most:
        return ", ".join(map(str, values))
    return ", ".join(map(str, values[:most - 1])) + f", ... ({len(values)} in all)"


def _ints(v, option: str) -> Tuple[int, ...]:
    """Integers from text ("3,3"), one int, or a sequence of ints (the API); UserError
    for anything else (floats, bools, strings inside a sequence)."""
    if isinstance(v, str):
        return parse_int_list(v, option)
    items = (v,) if isinstance(v, int) else v
    try:  # at most 16: a range of 10**12 must not be read whole
        out = tuple(_index(x) for x in itertools.islice(iter(items), 16))
    except TypeError:
        raise UserError(f"{option} {told(v)}: expected integers, e.g. 3 or (3, 3)") from None
    if not out:
        raise UserError(f"{option} {told(v)}: expected at least one integer")
    if len(out) == 16:
        raise UserError(f"{option} {told(v)}: more than 15 values")
    for x in out:
        if x.bit_length() > 63:
            raise UserError(f"{option}: {told(x)}: beyond any size cuDNN takes "
                            f"(32-bit, at most {INT32_MAX})")
    return out


def _index(x) -> int:
    """An int (numpy integers too), never a bool; TypeError otherwise."""
    if isinstance(x, bool):
        raise TypeError(x)
    return operator.index(x)


def _scalar(v, option: str) -> int:
    """One integer option (text or int): UserError when it is a list."""
    vals = _ints(v, option)
    if len(vals) != 1:
        raise UserError(f"{option} {told(v)}: expected one integer, got {len(vals)} values")
    return vals[0]


def _expand(values: Tuple[int, ...], nsp: int, option: str) -> Tuple[int, ...]:
    if len(values) == 1:
        return values * nsp
    if len(values) != nsp:
        raise UserError(
            f"{option} {','.join(map(str, values))}: {len(values)} values for a {nsp}-D "
            f"problem; give one value or {nsp}"
        )
    return tuple(values)


@dataclass(frozen=True)
class ConvProblem:
    """One convolution, as PyTorch's ``torch.nn.functional.conv{1,2,3}d`` sees it.

    ``input_shape`` is (N, C, *spatial); ``kernel``/``stride``/``padding``/``dilation``
    have one entry per spatial dim. ``tf32`` only applies to float32 (None otherwise).
    Build with :meth:`create`, which validates and fills defaults.
    """

    input_shape: Tuple[int, ...]
    out_channels: int
    kernel: Tuple[int, ...]
    stride: Tuple[int, ...]
    padding: Tuple[int, ...]
    dilation: Tuple[int, ...]
    groups: int = 1
    dtype: str = "float32"
    layout: str = "nchw"
    tf32: Optional[bool] = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def create(
        cls,
        shape,
        out_channels: int = 64,
        kernel=3,
        stride=1,
        padding=None,
        dilation=1,
        groups: int = 1,
        dtype: str = "float32",
        layout: str = "nchw",
        tf32: Optional[bool] = None,
        source: str = "api",
    ) -> "ConvProblem":
        """Validate user input (strings or ints) and return a problem, or raise UserError
        naming the bad value and what is valid: by its parameter (``dtype``), or by its
        flag (``--dtype``) with ``source="cli"``. ``padding=None`` means kernel//2 per
        dim."""
        def n(param: str) -> str:
            return "--" + param.replace("_", "-") if source == "cli" else param

        shape_t = _ints(shape, n("shape"))
        if len(shape_t) not in (3, 4, 5):
            raise UserError(
                f"{n('shape')} {clip(','.join(map(str, shape_t)))}: {len(shape_t)} values; "
                f"expected {_SHAPE_FORMS}"
            )
        nsp = len(shape_t) - 2
        names = ("N", "C") + _SPATIAL_NAMES[nsp]
        for name, v in zip(names, shape_t):
            if v < 1:
                raise UserError(f"{n('shape')}: {name} must be >= 1, got {v}")
            if v > INT32_MAX:
                raise UserError(f"{n('shape')}: {name} {v} is larger than cuDNN's limit "
                                f"{INT32_MAX} (sizes are 32-bit)")

        kernel_t = _expand(_ints(kernel, n("kernel")), nsp, n("kernel"))
        stride_t = _expand(_ints(stride, n("stride")), nsp, n("stride"))
        dil_t = _expand(_ints(dilation, n("dilation")), nsp, n("dilation"))
        if padding is None:
            pad_t = tuple(k // 2 for k in kernel_t)
        else:
            pad_t = _expand(_ints(padding, n("padding")), nsp, n("padding"))
        out_channels = _scalar(out_channels, n("out_channels"))
        groups = _scalar(groups, n("groups"))
        for option, vals, lo in ((n("kernel"), kernel_t, 1), (n("stride"), stride_t, 1),
                                 (n("dilation"), dil_t, 1), (n("padding"), pad_t, 0),
                                 (n("out_channels"), (out_channels,), 1),
                                 (n("groups"), (groups,), 1)):
            for v in vals:
                if v < lo:
                    raise UserError(f"{option} {v}: must be >= {lo}")
                if v > INT32_MAX:
                    raise UserError(f"{option} {v}: larger than cuDNN's limit {INT32_MAX} "
                                    f"(sizes are 32-bit)")
        c = shape_t[1]
        if c % groups or out_channels % groups:
            raise UserError(
                f"{n('groups')} {groups}: must divide input channels C={c} and "
                f"{n('out_channels')} {out_channels}; valid: "
                f"{_listed(_divisors(math.gcd(c, out_channels)))}"
            )
        for i in range(nsp):
            size, k, s, p, d = shape_t[2 + i], kernel_t[i], stride_t[i], pad_t[i], dil_t[i]
            if conv_output_size(size, k, s, p, d) < 1:
                extent = d * (k - 1) + 1
                what = f"{n('kernel')} {k}" + (f" with {n('dilation')} {d}" if d > 1 else "")
                raise UserError(
                    f"{what} in {names[2 + i]}: extent {extent} is larger than the padded "
                    f"input {size + 2 * p} ({size} + 2x{p} padding); use a smaller kernel "
                    f"or dilation, or more padding"
                )
        dtype_c = parse_dtype(dtype, n("dtype"))
        layout_c = str(layout).strip().lower()
        if layout_c in ("channels_last", "channels_last_3d"):
            layout_c = "nhwc"
        if layout_c not in LAYOUTS:
            raise UserError(f"{n('layout')} '{layout}': valid: nchw, nhwc (channels_last)")
        if layout_c == "nhwc" and nsp == 1:
            raise UserError(
                f"{n('layout')} nhwc: needs a 2-D or 3-D problem (PyTorch has no "
                f"channels_last format for 1-D tensors)"
            )
        problem = cls(shape_t, int(out_channels), kernel_t, stride_t, pad_t, dil_t,
                      int(groups), dtype_c, layout_c, None)
        for what, shape in (("input", problem.input_shape), ("weight", problem.weight_shape),
                            ("output", problem.output_shape)):
            if math.prod(shape) > INT32_MAX:
                raise UserError(
                    f"the {what} {'x'.join(map(str, shape))} has {math.prod(shape):,} "
                    f"elements; cuDNN's tensor descriptors take at most {INT32_MAX:,} "
                    f"(32-bit strides): use a smaller {n('shape')}, {n('out_channels')} or "
                    f"{n('kernel')}")
        if tf32 is not None and not isinstance(tf32, bool):
            raise UserError(f"{n('tf32')} {tf32!r}: valid: on, off (True, False or None)")
        if tf32 is not None and dtype_c != "float32":
            raise UserError(f"{n('tf32')}: applies to float32 only, not {dtype_c}")
        if dtype_c == "float32" and tf32 is None:
            tf32 = True  # PyTorch's default: torch.backends.cudnn.allow_tf32 = True
        return cls(shape_t, int(out_channels), kernel_t, stride_t, pad_t, dil_t, int(groups),
                   dtype_c, layout_c, tf32)

    # ------------------------------------------------------------------ derived shapes
    @property
    def spatial_dims(self) -> int:
        return len(self.input_shape) - 2

    @property
    def weight_shape(self) -> Tuple[int, ...]:
        return (self.out_channels, self.input_shape[1] // self.groups) + tuple(self.kernel)

    @property
    def output_shape(self) -> Tuple[int, ...]:
        sp = tuple(
            conv_output_size(self.input_shape[2 + i], self.kernel[i], self.stride[i],
                             self.padding[i], self.dilation[i])
            for i in range(self.spatial_dims)
        )
        return (self.input_shape[0], self.out_channels) + sp

    @property
    def is_depthwise(self) -> bool:
        return self.groups > 1 and self.groups == self.input_shape[1]

    # ------------------------------------------------------------------ cuDNN view
    @property
    def math_type(self) -> str:
        """The convolution descriptor's math type, by PyTorch's rule (ATen
        ``ConvolutionDescriptor::set``): float16 -> TENSOR_OP_MATH; float32 with TF32
        allowed -> DEFAULT_MATH (cuDNN may use TF32), without -> FMA_MATH; else DEFAULT."""
        if self.dtype == "float16":
            return "TENSOR_OP_MATH"
        if self.dtype == "float32" and not self.tf32:
            return "FMA_MATH"
        return "DEFAULT_MATH"

    @property
    def find_math_types(self) -> Tuple[str, ...]:
        """The math types cudnnFind runs under, PyTorch's first: every one this dtype
        permits, so that each (algorithm, math type) cuDNN offers is listed. float32 with
        TF32 off permits FMA_MATH only; float32 never gets ALLOW_CONVERSION (a silent cast
        to float16 that nobody asked for)."""
        if self.dtype == "float32":
            others = ("DEFAULT_MATH", "TENSOR_OP_MATH", "FMA_MATH") if self.tf32 else ()
        elif self.dtype == "float64":
            others = ("DEFAULT_MATH", "FMA_MATH", "TENSOR_OP_MATH")
        else:
            others = ("DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION",
                      "FMA_MATH")
        return (self.math_type,) + tuple(m for m in others if m != self.math_type)

    @property
    def math_label(self) -> str:
        """Human label of the arithmetic, e.g. 'float32, TF32 allowed (DEFAULT_MATH)'."""
        if self.dtype == "float32":
            mode = "TF32 allowed" if self.tf32 else "TF32 off, strict FP32"
            return f"float32, {mode} ({self.math_type})"
        return f"{self.dtype} ({self.math_type})"

    def cudnn_params(self):
        """(input, weight, output shapes, padding, stride, dilation) as cuDNN runs them:
        a 1-D problem is a 2-D one with H = 1, exactly as PyTorch passes it to cuDNN."""
        if self.spatial_dims == 1:
            n, c, length = self.input_shape
            k, c_g, kl = self.weight_shape
            _, _, ol = self.output_shape
            return ((n, c, 1, length), (k, c_g, 1, kl), (n, self.out_channels, 1, ol),
                    (0, self.padding[0]), (1, self.stride[0]), (1, self.dilation[0]))
        return (self.input_shape, self.weight_shape, self.output_shape, self.padding,
                self.stride, self.dilation)

    # ------------------------------------------------------------------ text and records
    def describe(self) -> str:
        def fmt(t):
            return "x".join(map(str, t))

        layout = {"nchw": "NCHW (contiguous)",
                  "nhwc": "NHWC (channels_last)" if self.spatial_dims == 2
                  else "NDHWC (channels_last_3d)"}[self.layout]
        if self.spatial_dims == 1:
            layout = "NCL (contiguous; cuDNN runs it as N,C,1,L)"
        return (
            f"{self.spatial_dims}-D convolution: input {fmt(self.input_shape)}, weight "
            f"{fmt(self.weight_shape)}, output {fmt(self.output_shape)}; padding "
            f"{fmt(self.padding)}, stride {fmt(self.stride)}, dilation {fmt(self.dilation)}, "
            f"groups {self.groups}{' (depthwise)' if self.is_depthwise else ''}; "
            f"{self.math_label}; layout {layout}"
        )

    def to_dict(self) -> dict:
        d = asdict(self)
        for k in ("input_shape", "kernel", "stride", "padding", "dilation"):
            d[k] = list(d[k])
        d["weight_shape"] = list(self.weight_shape)
        d["output_shape"] = list(self.output_shape)
        d["math_type"] = self.math_type
        return d

    @classmethod
    def from_dict(cls, d: dict) -> "ConvProblem":
        """A problem as to_dict wrote it, validated as :meth:`create` validates user input;
        UserError names the field."""
        if not isinstance(d, dict):
            raise UserError("problem: missing, or not an object")

        def ints(key, scalar=False):
            v = d.get(key)
            ok = (lambda x: isinstance(x, int) and not isinstance(x, bool))
            if scalar and ok(v):
                return v
            if not scalar and isinstance(v, list) and v and all(ok(x) for x in v):
                return tuple(v)
            want = "an integer" if scalar else "a non-empty list of integers"
            raise UserError(f"problem.{key}: {str(v)[:40]} is not {want}")

        for key in ("dtype", "layout"):
            if not isinstance(d.get(key), str):
                raise UserError(f"problem.{key}: {str(d.get(key))[:40]} is not a string")
        if d.get("tf32") is not None and not isinstance(d["tf32"], bool):
            raise UserError(f"problem.tf32: {str(d['tf32'])[:40]} is not true, false or null")
        try:
            problem = cls.create(ints("input_shape"), out_channels=ints("out_channels", True),
                              kernel=ints("kernel"), stride=ints("stride"),
                              padding=ints("padding"), dilation=ints("dilation"),
                              groups=ints("groups", True), dtype=d["dtype"],
                              layout=d["layout"], tf32=d.get("tf32"))
        except UserError as e:
            if str(e).startswith("problem."):
                raise
            raise UserError(f"problem: {e}") from None
        # saved derived fields must be the problem's own (not to_dict: its asdict copies
        # every field, most of reading a plan file's problems)
        derived = {"weight_shape": list(problem.weight_shape),
                   "output_shape": list(problem.output_shape), "math_type": problem.math_type}
        for key in ("weight_shape", "output_shape", "math_type"):
            if key in d and d[key] != derived[key]:
                raise UserError(f"problem.{key}: {str(d[key])[:40]} does not match the "
                                f"problem ({derived[key]})")
        return problem
