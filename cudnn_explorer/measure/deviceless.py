"""cuDNN's heuristic rankings for target GPUs, from device profiles, with no GPU needed.

cuDNN can crash inside these queries (cuDNN 9.19 on an H200 died with SIGSEGV on a compute
capability 10.0 profile), so each target is asked in a worker process of its own: a
target whose worker dies is reported with the signal, and the others go on.

    python -m cudnn_explorer.measure.deviceless SPEC.json OUT.json   (the worker)
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from typing import Dict, List, Tuple

from ..core.files import write_atomic
from ..core.problem import ConvProblem
from ..core.targets import DeviceProfile, TargetPlan, TargetRanking, cudnn_strides
from .procs import child_env, describe_rc

__all__ = ["rank_targets", "rank_many", "dump_profile"]

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
                 timeout_s: float = 120.0) -> List[TargetRanking]:
    """One TargetRanking per (profile, direction), profiles in order."""
    return [r for rs in rank_many([(problem, list(directions))], profiles, timeout_s)
            for r in rs]


def rank_many(items: List[Tuple[ConvProblem, List[str]]], profiles: List[DeviceProfile],
              timeout_s: float = 120.0) -> List[List[TargetRanking]]:
    """For each (problem, directions) of ``items``, its TargetRankings (profile by profile,
    directions in order). One worker process per profile answers every item; when it
    dies, the item it was on is reported with the cause and a new worker takes the rest."""
    queries = [(k, d) for k, (_, dirs) in enumerate(items) for d in dirs]
    got: Dict[Tuple[int, str, str], TargetRanking] = {}
    for prof in profiles:
        todo = list(queries)
        while todo:
            answers, failure = _worker_run(items, todo, prof, timeout_s)
            for (k, d), res in answers:
                got[(k, d, prof.key)] = _ranking(prof, d, res)
            done = {q for q, _ in answers}
            todo = [q for q in todo if q not in done]
            if todo:  # the worker stopped on todo[0]: report it, go on after it
                k, d = todo.pop(0)
                got[(k, d, prof.key)] = _ranking(prof, d, {"error": failure})
    return [[got[(k, d, p.key)] for p in profiles for d in dirs]
            for k, (_, dirs) in enumerate(items)]


def _ranking(prof: DeviceProfile, direction: str, res: dict) -> TargetRanking:
    base = dict(target=prof.key, device_name=prof.device_name, direction=direction,
                compute_capability=prof.compute_capability, sm_count=prof.sm_count,
                synthesized=prof.synthesized)
    if "error" in res:
        return TargetRanking(status=f"failed: {res['error']}", **base)
    return TargetRanking(**base, **{m.lower(): [TargetPlan(**p) for p in res[m]]
                                    for m in MODES})


def _worker_run(items, todo, prof: DeviceProfile, timeout_s):
    """Run one worker over ``todo``: ([((item, direction), result)] answered, why it stopped
    early)."""
    spec = dict(profile=prof.text, key=prof.key,
                queries=[dict(item=k, direction=d, geometry=_geometry(items[k][0]))
                         for k, d in todo])
    with tempfile.TemporaryDirectory(prefix="cudnn_explorer_target_") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as f:
            json.dump(spec, f)
        try:
            r = subprocess.run([sys.executable, "-m", "cudnn_explorer.measure.deviceless",
                                spec_path, out_path], env=child_env(), capture_output=True,
                               text=True, timeout=timeout_s * max(1, len(todo)))
            rc, err = r.returncode, r.stderr
        except subprocess.TimeoutExpired:
            rc, err = None, ""
        answers = []
        if os.path.exists(out_path):
            with open(out_path) as f:
                answers = [((a["item"], a["direction"]), a["result"]) for a in json.load(f)]
    last = err.strip().splitlines()[-1][:200] if err.strip() else ""
    why = ("no answer in time" if rc is None else
           f"the query process {describe_rc(rc)}" if rc else "no answer")
    return answers, why + (f" ({last})" if last and rc else "")


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
    out = []
    for q in spec["queries"]:
        g, d = q["geometry"], q["direction"]
        try:
            res = {m: [dict(name=p.name, numeric_notes=list(p.numeric_notes),
                            behavior_notes=list(p.behavior_notes))
                       for p in native.call(f"ranking {d} for {spec['key']}",
                                            C.deviceless_heuristics, d, g["dtype"],
                                            g["x_dims"], g["x_strides"], g["w_dims"],
                                            g["w_strides"], g["y_dims"], g["y_strides"],
                                            g["padding"], g["stride"], g["dilation"],
                                            spec["profile"], m)]
                   for m in MODES}
        except Exception as e:  # noqa: BLE001  (recorded for the parent, which reports it)
            res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300]}"}
        out.append(dict(item=q["item"], direction=d, result=res))
        write_atomic(out_path, json.dumps(out))  # after each query: a crash keeps these
    return 0


if __name__ == "__main__":
    sys.exit(_worker(sys.argv[1], sys.argv[2]))
