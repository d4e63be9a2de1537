"""cuDNN's heuristic rankings for target GPUs, from device profiles, with no GPU needed.

cuDNN can crash inside these queries (cuDNN 9.19 on an H200 died with SIGSEGV on a compute
capability 10.0 profile), so each target is asked in a worker process of its own: a
target whose worker dies is reported with the signal, and the others go on.

    python -m cudnn_explorer.measure.targets SPEC.json OUT.json   (the worker)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Callable, List

from ..core.problem import ConvProblem
from ..core.targets import DeviceProfile, TargetPlan, TargetRanking, cudnn_strides
from .procs import child_env, describe_rc

__all__ = ["rank_targets", "dump_profile"]

MODES = ("A", "B", "FALLBACK")
# Fault injection for tests: the worker for this target kills itself as cuDNN 9.19 did.
_CRASH_ENV = "CUDNN_EXPLORER_TEST_CRASH_TARGET"


def _geometry(problem: ConvProblem) -> dict:
    xs, ws, ys, pad, stride, dil = problem.cudnn_params()
    return dict(dtype=problem.dtype, x_dims=list(xs), w_dims=list(ws), y_dims=list(ys),
                x_strides=list(cudnn_strides(xs, problem.layout)),
                w_strides=list(cudnn_strides(ws, problem.layout)),
                y_strides=list(cudnn_strides(ys, problem.layout)),
                padding=list(pad), stride=list(stride), dilation=list(dil))


def rank_targets(problem: ConvProblem, directions, profiles: List[DeviceProfile],
                 timeout_s: float = 120.0,
                 say: Callable[[str], None] = lambda m: None) -> List[TargetRanking]:
    """One TargetRanking per (profile, direction), profiles in order."""
    out = []
    for prof in profiles:
        say(f"heuristics for {prof.key} ({prof.device_name})")
        out += _one_target(problem, list(directions), prof, timeout_s)
    return out


def _one_target(problem, directions, prof: DeviceProfile, timeout_s) -> List[TargetRanking]:
    base = dict(target=prof.key, device_name=prof.device_name,
                compute_capability=prof.compute_capability, sm_count=prof.sm_count,
                synthesized=prof.synthesized)
    spec = dict(geometry=_geometry(problem), directions=directions, profile=prof.text,
                key=prof.key)
    with tempfile.TemporaryDirectory(prefix="cudnn_explorer_target_") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        try:
            r = subprocess.run([sys.executable, "-m", "cudnn_explorer.measure.targets",
                                spec_path, out_path], env=child_env(), capture_output=True,
                               text=True, timeout=timeout_s)
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, ""
        got = {}
        if os.path.exists(out_path):
            with open(out_path) as f:
                got = json.load(f)
    rankings = []
    for d in directions:
        res = got.get(d)
        if res is None:
            why = (f"no answer in {timeout_s:.0f} s" if rc is None else
                   f"the query process {describe_rc(rc)}" if rc else "no answer")
            last = err.strip().splitlines()[-1][:200] if err.strip() else ""
            rankings.append(TargetRanking(direction=d, status=f"failed: {why}"
                                          + (f" ({last})" if last and rc else ""), **base))
        elif "error" in res:
            rankings.append(TargetRanking(direction=d, status=f"failed: {res['error']}", **base))
        else:
            rankings.append(TargetRanking(
                direction=d, **base,
                **{m.lower(): [TargetPlan(**p) for p in res[m]] for m in MODES}))
    return rankings


def dump_profile(device: int) -> str:
    """The local GPU's own serialized device profile (JSON text)."""
    from . import native

    native.require_gpu(device)
    text = native.call(f"describing GPU {device}", native.load().device_properties_json,
                       int(device))
    DeviceProfile.parse(text, f"GPU {device}")  # what we write must load again
    return text


def _worker(spec_path: str, out_path: str) -> int:
    from . import native

    with open(spec_path) as f:
        spec = json.load(f)
    if os.environ.get(_CRASH_ENV) == spec["key"]:
        os.kill(os.getpid(), signal.SIGSEGV)
    C = native.load()
    g = spec["geometry"]
    out = {}
    for d in spec["directions"]:
        try:
            out[d] = {m: [dict(name=p.name, numeric_notes=list(p.numeric_notes),
                               behavior_notes=list(p.behavior_notes))
                          for p in native.call(f"ranking {d} for {spec['key']}",
                                               C.deviceless_heuristics, d, g["dtype"],
                                               g["x_dims"], g["x_strides"], g["w_dims"],
                                               g["w_strides"], g["y_dims"], g["y_strides"],
                                               g["padding"], g["stride"], g["dilation"],
                                               spec["profile"], m)]
                      for m in MODES}
        except Exception as e:  # noqa: BLE001  (recorded for the parent, which reports it)
            out[d] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        with open(out_path, "w") as f:  # after each direction: a later crash keeps these
            json.dump(out, f)
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1], sys.argv[2]))
