"""Pure numbers: timing statistics, FLOP and byte counts, peaks, accuracy tolerances.

No torch import; every rule is testable without a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

from .problem import ConvProblem

__all__ = [
    "NOISY_SPREAD", "FIND_DISAGREE", "flops", "min_bytes", "tolerance",
    "Peak", "peak_for", "PEAK_SOURCE", "DTYPE_BYTES",
]

NOISY_SPREAD = 0.10   # IQR / median above this marks a row noisy (torch.utils.benchmark's rule)
FIND_DISAGREE = 0.20  # |Find / re-timed median - 1| above this flags the row
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8}


def flops(p: ConvProblem, direction: str) -> int:
    """Floating-point operations of one direction: 2 x multiply-adds. The count is the
    conventional one (every kernel tap, padded positions included) and the same for all
    three directions: 2 * N * K * prod(output spatial) * (C / groups) * prod(kernel)."""
    n, k = p.output_shape[0], p.output_shape[1]
    c_per_group = p.input_shape[1] // p.groups
    return 2 * n * k * math.prod(p.output_shape[2:]) * c_per_group * math.prod(p.kernel)


def min_bytes(p: ConvProblem, direction: str) -> int:
    """Fewest bytes one direction must move through device memory: each input read once,
    the output written once. fwd: x, w -> y; bwd-data: dy, w -> dx; bwd-filter: x, dy -> dw."""
    nx, nw, ny = (math.prod(s) for s in (p.input_shape, p.weight_shape, p.output_shape))
    elems = {"fwd": nx + nw + ny, "bwd-data": ny + nw + nx, "bwd-filter": nx + ny + nw}[direction]
    return elems * DTYPE_BYTES[p.dtype]


def tolerance(dtype: str, math_type: str) -> float:
    """Largest acceptable max |out - ref| / max |ref| against a float64 reference computed
    from the same (already rounded) inputs. The bound covers rounding of the output and
    accumulation; TF32 (float32 under any math type but FMA_MATH) rounds inputs to a 10-bit
    mantissa, bfloat16 outputs have an 8-bit one."""
    if dtype == "float64":
        return 1e-10
    if dtype == "float32":
        return 1e-4 if math_type == "FMA_MATH" else 1e-2
    if dtype == "float16":
        return 1e-2
    return 3e-2  # bfloat16


@dataclass(frozen=True)
class Peak:
    tflops: float   # dense arithmetic peak for the dtype and math type
    unit: str       # which unit, e.g. "TF32 tensor core"
    gbs: float      # memory bandwidth, GB/s (10^9 bytes/s)


PEAK_SOURCE = ("NVIDIA datasheets, dense (no sparsity), boost clock: H100/H200 SXM "
               "and A100 SXM4 80GB. Hopper FP32 66.9, TF32 TC 494.7, FP16/BF16 TC 989.4, "
               "FP16/BF16 non-TC 133.8, FP64 33.5, FP64 TC 66.9 TFLOP/s")

# Per GPU: (FP64, FP64 TC, FP32, TF32 TC, FP16/BF16 non-TC, FP16/BF16 TC) TFLOP/s, GB/s.
_GPUS = {
    "H200": ((33.5, 66.9, 66.9, 494.7, 133.8, 989.4), 4800.0),
    "H100 80GB HBM3": ((33.5, 66.9, 66.9, 494.7, 133.8, 989.4), 3350.0),
    "A100-SXM4-80GB": ((9.7, 19.5, 19.5, 156.0, 78.0, 312.0), 2039.0),
}


def peak_for(gpu_name: str, dtype: str, math_type: str) -> Optional[Peak]:
    """The arithmetic ceiling that applies to a row, or None for a GPU not in the table.
    CUDNN_FMA_MATH forbids tensor cores; every other math type permits them (for float32
    that means TF32), so their ceiling is the tensor-core rate."""
    entry = next((v for k, v in _GPUS.items() if k in gpu_name), None)
    if entry is None:
        return None
    (fp64, fp64_tc, fp32, tf32, half, half_tc), gbs = entry
    fma = math_type == "FMA_MATH"
    if dtype == "float64":
        return Peak(fp64 if fma else fp64_tc, "FP64" if fma else "FP64 tensor core", gbs)
    if dtype == "float32":
        return Peak(fp32 if fma else tf32, "FP32" if fma else "TF32 tensor core", gbs)
    name = "FP16" if dtype == "float16" else "BF16"
    return Peak(half if fma else half_tc, name if fma else f"{name} tensor core", gbs)
