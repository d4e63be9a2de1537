"""A GPU's environment without importing torch, while nothing it depends on has changed.

environment() (measure/environment.py) needs torch, a CUDA context and the extension:
seconds before anything else, most of a repeat that the results store answers. What it
reports is fixed by things that can be read in milliseconds: the driver and the GPUs
(/proc/driver/nvidia), the Python and the installed torch and NVIDIA packages (versions
and library files), the cuDNN and CUDA libraries the loader can find, the extension's
file, and the variables that pick the device or the libraries. Their digest
(:func:`fingerprint`) keys a copy of the last environment() answer; any change, or
anything unreadable, means no copy, and environment() runs again (the caller then keeps
its answer with :func:`remember`).
"""
from __future__ import annotations

import glob
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import socket
import sys
from typing import List, Optional

from ..core.errors import UserError
from ..core.files import cache_home, write_atomic
from ..core.exploration import Environment

__all__ = ["fingerprint", "cached_environment", "remember", "cache_dir"]

_PROC = "/proc/driver/nvidia"
# Variables that change which GPU a device index is, or which libraries load.
_VARS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "LD_LIBRARY_PATH", "LD_PRELOAD",
         "PYTHONPATH", "CUDNN_PATH", "CUDA_HOME", "CUDA_PATH")
_SYSTEM_LIB_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/local/cuda/lib64",
                    "/usr/lib/aarch64-linux-gnu")


def cache_dir() -> str:
    return os.path.join(cache_home(), "environments")


def _stat(path: str) -> str:
    st = os.stat(path)
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def _libraries(dirs: List[str]) -> List[str]:
    out = []
    for d in dirs:
        for pat in ("libcudnn*.so*", "libcudart*.so*", "libcuda.so*", "libtorch_cuda*.so"):
            out += [_stat(p) for p in sorted(glob.glob(os.path.join(d, pat)))]
    return out


def fingerprint(device: int) -> Optional[str]:
    """A digest of everything environment(device) depends on, read without torch or the
    GPU; None where something cannot be read (then no shortcut is taken)."""
    try:
        with open(os.path.join(_PROC, "version")) as f:
            parts = [f.read()]
        for info in sorted(glob.glob(os.path.join(_PROC, "gpus", "*", "information"))):
            with open(info) as f:
                parts.append(f.read())
        if len(parts) < 2:
            return None
        torch_spec = importlib.util.find_spec("torch")
        ext_spec = importlib.util.find_spec("cudnn_explorer._C")
        if torch_spec is None or torch_spec.origin is None or ext_spec is None \
                or ext_spec.origin is None:
            return None
        torch_dir = os.path.dirname(torch_spec.origin)
        site = os.path.dirname(torch_dir)
        parts += [str(device), socket.gethostname(), sys.executable, sys.version,
                  _stat(ext_spec.origin), _stat(torch_spec.origin)]
        parts += [f"{v}={os.environ.get(v, '')}" for v in _VARS]
        parts += sorted(f"{d.metadata['Name']}=={d.version}"
                        for d in importlib.metadata.distributions(path=[site])
                        if (d.metadata["Name"] or "").lower().startswith(("torch", "nvidia")))
        lib_dirs = [os.path.join(torch_dir, "lib")]
        lib_dirs += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib")))
        lib_dirs += [p for p in os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        lib_dirs += list(_SYSTEM_LIB_DIRS)
        parts += _libraries(lib_dirs)
        if os.path.exists("/etc/ld.so.cache"):
            parts.append(_stat("/etc/ld.so.cache"))
    except (OSError, ValueError, ImportError):
        return None
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _path(fp: str, where: Optional[str]) -> str:
    return os.path.join(where or cache_dir(), f"{fp}.json")


def cached_environment(device: int, where: Optional[str] = None) -> Optional[Environment]:
    """The environment last remembered for ``device`` when its fingerprint is unchanged,
    else None."""
    fp = fingerprint(device)
    if fp is None:
        return None
    try:
        with open(_path(fp, where)) as f:
            env = Environment.from_dict(json.load(f))
    except (OSError, ValueError, TypeError, KeyError, UserError):
        return None
    return env if env.device_index == device else None


def remember(env: Environment, where: Optional[str] = None) -> None:
    """Keep ``env`` (what environment(env.device_index) just answered) under the current
    fingerprint; a cache that cannot be written is skipped, silently."""
    fp = fingerprint(env.device_index)
    if fp is None:
        return
    path = _path(fp, where)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_atomic(path, json.dumps(env.to_dict()))
    except OSError:
        pass
