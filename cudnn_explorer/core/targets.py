"""GPUs we do not own: cuDNN device profiles and the heuristic rankings cuDNN gives for
them without the device (Note [deviceless heuristics] in csrc/engines.h). Pure Python.

A profile is cuDNN's own serialized device-properties descriptor (JSON). Shipped profiles
live in ``data/devices/`` with ``index.json`` saying, per short name, which file, which
GPU, and whether it was dumped from the device or synthesized from published values.
Everything derived from a profile is a heuristic ranking, never a measurement.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from .errors import UserError
from .files import read_text
from .knobs import allowed_by_pytorch
from .schema import Record

__all__ = ["PROFILE_FIELDS", "DeviceProfile", "TargetPlan", "TargetRanking", "load_profile",
           "shipped_profiles", "resolve_targets", "cudnn_strides", "DEFAULT_BENCHMARK_LIMIT"]

DEFAULT_BENCHMARK_LIMIT = 10  # torch.backends.cudnn.benchmark_limit's default

# The fields of cuDNN's descriptor JSON (as cuDNN 9.19 serialized an H200) and their kinds.
PROFILE_FIELDS = {
    "maxGridSize": "int3", "maxBlockSize": "int3", "regsPerBlock": "int",
    "multiProcessorCount": "int", "warpSize": "int", "maxSharedMemoryPerBlock": "int",
    "maxSharedMemoryPerBlockOptin": "int", "reservedSharedMemoryPerBlock": "int",
    "maxRegistersPerSM": "int", "maxCtasPerSM": "int", "maxThreadsPerBlock": "int",
    "maxThreadsPerSM": "int", "pciDeviceId": "int", "isTccDriver": "int",
    "supportCoopLaunch": "int", "totalGlobalMem": "int", "smClockRateKHz": "int",
    "memClockRateKHz": "int", "l2CacheSize": "int", "cudaDeviceId": "int",
    "deviceVer": "int", "driverVer": "int", "deviceName": "str",
}
_WIDE_FIELDS = ("totalGlobalMem",)  # bytes: above 2**31 on every GPU cuDNN 9 runs on
_MUST_BE_POSITIVE = ("multiProcessorCount", "warpSize", "maxThreadsPerBlock",
                     "maxThreadsPerSM", "smClockRateKHz", "l2CacheSize", "deviceVer",
                     "maxSharedMemoryPerBlockOptin", "regsPerBlock")

_PKG = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data_dir() -> str:
    """data/devices of a checkout (or an editable install); cudnn_explorer/devices, where
    setup.py installs the same files, otherwise."""
    checkout = os.path.join(os.path.dirname(_PKG), "data", "devices")
    return checkout if os.path.isdir(checkout) else os.path.join(_PKG, "devices")


@dataclass(frozen=True)
class DeviceProfile:
    """One GPU as cuDNN describes it. ``text``: the JSON handed to cuDNN unchanged."""

    key: str                # short name ("h200") or the file's path
    device_name: str
    compute_capability: str
    sm_count: int
    text: str
    synthesized: bool = False
    source: str = ""

    @classmethod
    def parse(cls, text: str, key: str, synthesized: bool = False,
              source: str = "") -> "DeviceProfile":
        """A profile from its JSON; UserError naming ``key`` and the bad field."""
        try:
            d = json.loads(text)
        except (ValueError, RecursionError) as e:
            raise UserError(f"device profile '{key}': not valid JSON: {str(e)[:80]}") from None
        if not isinstance(d, dict):
            raise UserError(f"device profile '{key}': not a JSON object")
        for name, kind in PROFILE_FIELDS.items():
            v = d.get(name)
            ok = {"int": lambda x: isinstance(x, int) and not isinstance(x, bool)
                  and 0 <= x < 2**63,
                  "int3": lambda x: isinstance(x, list) and len(x) == 3 and all(
                      isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**31
                      for i in x),
                  "str": lambda x: isinstance(x, str) and x.strip() != ""}[kind](v)
            if not ok:
                want = {"int": "an integer >= 0", "int3": "a list of 3 positive integers",
                        "str": "a non-empty string"}[kind]
                raise UserError(f"device profile '{key}': {name}: "
                                f"{json.dumps(v)[:40] if name in d else 'missing'}; "
                                f"expected {want}")
        for name in _MUST_BE_POSITIVE:
            if d[name] <= 0:
                raise UserError(f"device profile '{key}': {name}: must be > 0")
        for name, kind in PROFILE_FIELDS.items():  # what cudaDeviceProp holds, as cuDNN reads it
            if kind == "int" and name not in _WIDE_FIELDS and d[name] >= 2**31:
                raise UserError(f"device profile '{key}': {name}: {d[name]}; expected an "
                                f"integer below 2**31")
        if len(d["deviceName"].encode("utf-8")) > 255:
            raise UserError(f"device profile '{key}': deviceName: "
                            f"{len(d['deviceName'].encode('utf-8'))} bytes; expected at most 255")
        ver = d["deviceVer"]
        if not 500 <= ver <= 9990:
            raise UserError(f"device profile '{key}': deviceVer: {ver}; expected the compute "
                            f"capability x 100 (900 for 9.0), from 500 (5.0)")
        return cls(key=key, device_name=d["deviceName"],
                   compute_capability=f"{ver // 100}.{(ver % 100) // 10}",
                   sm_count=d["multiProcessorCount"], text=text, synthesized=synthesized,
                   source=source)


def shipped_profiles() -> Dict[str, dict]:
    """Short name -> index entry (file, GPU, synthesized, sources) of the shipped profiles."""
    with open(os.path.join(_data_dir(), "index.json")) as f:
        return json.load(f)


def load_profile(name: str) -> DeviceProfile:
    """A shipped profile by short name, or a profile file by path."""
    index = shipped_profiles()
    key = name.strip().lower()
    if key in index:
        entry = index[key]
        with open(os.path.join(_data_dir(), entry["file"])) as f:
            return DeviceProfile.parse(f.read(), key, bool(entry.get("synthesized")),
                                       entry.get("source", ""))
    if os.path.sep in name or name.endswith(".json"):
        return DeviceProfile.parse(read_text(name, "device profile"), name,
                                   source="file given by the user")
    raise UserError(f"--target '{name}': unknown; valid: {', '.join(sorted(index))}, or a "
                    f"profile file (.json, e.g. from --dump-device-profile)")


def resolve_targets(text: str) -> List[DeviceProfile]:
    names = [t.strip() for t in str(text).split(",")]
    if not names or any(not t for t in names):
        raise UserError(f"--target '{text}': expected names separated by commas, e.g. "
                        f"a100,l4,v100")
    if len(set(n.lower() for n in names)) != len(names):
        raise UserError(f"--target '{text}': a target is listed twice")
    return [load_profile(n) for n in names]


def cudnn_strides(shape: Sequence[int], layout: str) -> Tuple[int, ...]:
    """Strides of a dense tensor of ``shape`` (N, C, spatial...) in the layout: row-major
    for "nchw", channels innermost for "nhwc" (what torch.empty gives in channels_last)."""
    if layout == "nchw" or len(shape) < 4:
        out, acc = [], 1
        for s in reversed(shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))
    c = shape[1]
    strides = [0] * len(shape)
    strides[1] = 1
    acc = c
    for i in range(len(shape) - 1, 1, -1):
        strides[i] = acc
        acc *= shape[i]
    strides[0] = acc
    return tuple(strides)


@dataclass
class TargetPlan(Record):
    name: str
    numeric_notes: List[str] = field(default_factory=list)
    behavior_notes: List[str] = field(default_factory=list)


@dataclass
class TargetRanking(Record):
    """cuDNN's heuristic lists for one direction of a problem on one target device:
    ``a``, ``b`` and ``fallback`` (modes A, B and FALLBACK, in their order). ``status``:
    "OK", or why there are none (the query's error, or the worker process's death)."""

    target: str
    device_name: str
    compute_capability: str
    sm_count: int
    direction: str
    status: str = "OK"
    a: List[TargetPlan] = field(default_factory=list)
    b: List[TargetPlan] = field(default_factory=list)
    fallback: List[TargetPlan] = field(default_factory=list)
    synthesized: bool = False

    @property
    def ok(self) -> bool:
        return self.status == "OK"

    def candidates(self) -> List[TargetPlan]:
        """PyTorch's generator order (Conv_v8): heuristic mode A, then the fallbacks, once
        each."""
        seen, out = set(), []
        for p in self.a + self.fallback:
            if p.name not in seen:
                seen.add(p.name)
                out.append(p)
        return out

    def allowed(self, dtype: str, tf32: Optional[bool],
                deterministic: bool = False) -> List[TargetPlan]:
        """The candidates PyTorch's filters keep (Conv_v8: no DOWN_CONVERT_INPUTS; no
        TENSOR_CORE for float32 with TF32 off; no NONDETERMINISTIC when deterministic)."""
        return [p for p in self.candidates()
                if allowed_by_pytorch(p.numeric_notes, dtype, tf32, deterministic)]

    def heuristic_pick(self, dtype: str, tf32: Optional[bool],
                       deterministic: bool = False) -> Optional[TargetPlan]:
        """What PyTorch would run with benchmark off: the first candidate that passes its
        filters (on the device it must also build; a heuristic cannot say whether it does)."""
        ok = self.allowed(dtype, tf32, deterministic)
        return ok[0] if ok else None

    def benchmark_candidates(self, dtype: str, tf32: Optional[bool], limit: int =
                             DEFAULT_BENCHMARK_LIMIT) -> List[TargetPlan]:
        """The plans benchmark mode would time: the first ``limit`` that pass (0: all)."""
        ok = self.allowed(dtype, tf32)
        return ok if limit == 0 else ok[:limit]
