"""PyTorch's own choice for a problem, in every mode, each measured in a fresh child.

PyTorch's benchmark cache lives per process and ignores the benchmark flag once a shape
has run (README, "PyTorch's choice"), so each mode runs in its own child process
(cudnn_explorer.child) with cudnn-frontend's or cuDNN's log switched on; the parent reads
the child's measurements and its log, and names the plan or algorithm PyTorch ran.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import Iterable, List, Optional

from . import logs
from .kernels import same_kernels
from .errors import ExplorerError
from .problem import ConvProblem
from .records import AlgoResult, PyTorchPick, Timing

__all__ = ["ModeSpec", "default_modes", "ChildError", "child_env", "describe_rc", "run_child",
           "pytorch_picks",
           "match_kernels", "attach_legacy"]

_PKG_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Variables the child must not inherit from the user's shell: they change what it logs.
_LOG_VARS = ("CUDNN_FRONTEND_LOG_INFO", "CUDNN_FRONTEND_LOG_FILE", "CUDNN_LOGLEVEL_DBG",
             "CUDNN_LOGDEST_DBG", "CUDNN_LOGINFO_DBG", "CUDNN_LOGERR_DBG", "CUDNN_LOGWARN_DBG",
             "TORCH_CUDNN_V8_API_DISABLED", "TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT")


class ChildError(ExplorerError, RuntimeError):
    """A PyTorch child process crashed, hung or wrote no result or log."""

    exit_code = 1


@dataclass(frozen=True)
class ModeSpec:
    label: str
    mode: str                       # benchmark | heuristic | deterministic
    legacy: bool = False            # TORCH_CUDNN_V8_API_DISABLED=1
    benchmark_limit: Optional[int] = None  # None: PyTorch's default

    @property
    def api(self) -> str:
        """PyTorchPick.api of this mode's picks."""
        return "legacy" if self.legacy else "engine"


def default_modes(benchmark_limit: Optional[int] = None) -> List[ModeSpec]:
    """benchmark (PyTorch's default limit, or ``benchmark_limit``), benchmark timing every
    candidate (limit 0) unless that is the first already, heuristics, deterministic, and
    PyTorch's legacy (cudnnFind) path with benchmark on."""
    first = "benchmark" if benchmark_limit is None else f"benchmark, limit {benchmark_limit}"
    specs = [ModeSpec(first, "benchmark", False, benchmark_limit)]
    if benchmark_limit != 0:
        specs.append(ModeSpec("benchmark, limit 0 (all)", "benchmark", False, 0))
    specs += [ModeSpec("heuristics (benchmark off)", "heuristic"),
              ModeSpec("deterministic", "deterministic"),
              ModeSpec("legacy API, benchmark", "benchmark", True, benchmark_limit)]
    return specs


def child_env(drop=()) -> dict:
    """The environment of a child of ours: this one, less ``drop``, with this package
    importable (PYTHONPATH starts with its parent directory)."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = _PKG_PARENT + (os.pathsep + env["PYTHONPATH"]
                                       if env.get("PYTHONPATH") else "")
    return env


def describe_rc(rc: int) -> str:
    """A child's exit status in words ("exit code 1", "killed by SIGABRT")."""
    if rc < 0:
        try:
            return f"killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


def run_child(problem: ConvProblem, directions: Iterable[str], spec: ModeSpec,
              device: int = 0, seed: int = 0, budget_ms: float = 100.0,
              timeout_s: float = 300.0, python: Optional[str] = None,
              child_module: str = "cudnn_explorer.child") -> dict:
    """Run one mode in a fresh process. Returns the child's result dict with "log_text"
    (the cudnn-frontend or cuDNN API log). Raises ChildError on a crash, a hang (after
    ``timeout_s``), no result, or no log."""
    with tempfile.TemporaryDirectory(prefix="cudnn_explorer_") as tmp:
        log = os.path.join(tmp, "api.log" if spec.legacy else "frontend.log")
        spec_path, result_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "result.json")
        with open(spec_path, "w") as f:
            json.dump({"problem": problem.to_dict(), "directions": list(directions),
                       "mode": spec.mode, "benchmark_limit": spec.benchmark_limit,
                       "device": device, "seed": seed, "budget_ms": budget_ms,
                       "log_file": None if spec.legacy else log}, f)
        env = child_env(drop=_LOG_VARS)
        if spec.legacy:
            env.update(TORCH_CUDNN_V8_API_DISABLED="1", CUDNN_LOGLEVEL_DBG="3",
                       CUDNN_LOGDEST_DBG=log)
        else:
            env.update(CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE=log)
        what = f"PyTorch child ({spec.label})"
        try:
            proc = subprocess.run([python or sys.executable, "-m", child_module, spec_path,
                                   result_path], env=env, capture_output=True, text=True,
                                  timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise ChildError(f"{what} did not finish within {timeout_s:g} s and was killed; "
                             f"raise --child-timeout or use --no-pytorch") from None
        if proc.returncode != 0:
            tail = [ln for ln in (proc.stderr or "").strip().splitlines() if ln.strip()]
            raise ChildError(f"{what} failed ({describe_rc(proc.returncode)}): "
                             f"{tail[-1] if tail else 'no output'}")
        if not os.path.exists(result_path):
            raise ChildError(f"{what} exited without writing its result")
        with open(result_path) as f:
            result = json.load(f)
        text = ""
        if os.path.exists(log):
            with open(log, errors="replace") as f:
                text = f.read()
        if not text.strip():
            which = ("cuDNN API log (CUDNN_LOGLEVEL_DBG)" if spec.legacy
                     else "cudnn-frontend log (CUDNN_FRONTEND_LOG_INFO)")
            raise ChildError(f"{what} wrote no {which}; cannot tell what PyTorch chose")
        result["log_text"] = text
        return result


def picks_from_result(spec: ModeSpec, result: dict) -> List[PyTorchPick]:
    """Turn one child's result (and its log) into one PyTorchPick per direction, in the
    result's order. attach_legacy adds what needs our legacy rows."""
    text = result.get("log_text", "")
    limit = result.get("settings", {}).get("benchmark_limit")
    searches = [] if spec.legacy else logs.parse_frontend_log(text)
    calls = logs.parse_api_log(text) if spec.legacy else []
    picks = []
    for dres in result["directions"]:
        d = dres["direction"]
        p = PyTorchPick(label=spec.label, mode=spec.mode, api=spec.api,
                        benchmark_limit=limit if spec.mode == "benchmark" else None,
                        first_call_ms=dres["first_call_ms"],
                        first_peak_alloc_bytes=dres["first_peak_alloc_bytes"],
                        first_reserved_growth_bytes=dres["first_reserved_growth_bytes"],
                        steady=Timing.from_dict(dres["steady"]),
                        steady_peak_alloc_bytes=dres["steady_peak_alloc_bytes"],
                        kernels=list(dres["kernels"]))
        if spec.legacy:
            c = logs.legacy_choice(calls, d)
            if c is None:
                p.error = "the cuDNN API log shows no convolution call for this direction"
            else:
                p.legacy_algo = f"{c.algo_name} ({c.math_type})"
                p.plan_workspace_bytes = c.workspace_bytes
        else:
            # The searches of this direction; the one written during the first call is the
            # one that chose (later calls hit PyTorch's cache and log no search).
            mine = [s for s in searches if s.direction == d]
            s = mine[0] if mine else None
            if s is None:
                p.error = ("no plan search for this direction in the cudnn-frontend log "
                           "(was the shape already cached?)")
            else:
                p.engine_tag = s.winner
                p.heuristic_candidates, p.fallback_candidates = (s.heuristic_count,
                                                                 s.fallback_count)
                p.candidates = [dict(tag=c.tag, numeric_notes=c.numeric_notes,
                                     behavior_notes=c.behavior_notes,
                                     workspace_bytes=c.workspace_bytes, source=c.source)
                                for c in s.candidates]
                p.timed = [[t, ms] for t, ms in s.timed]
                w = s.candidate(s.winner) if s.winner else None
                if w is not None:
                    p.plan_workspace_bytes = w.workspace_bytes
                    p.numeric_notes, p.behavior_notes = w.numeric_notes, w.behavior_notes
                    p.deterministic = w.deterministic
                elif s.winner is None:
                    p.error = "the log shows no plan that ran"
        picks.append(p)
    return picks


def attach_legacy(picks: List[PyTorchPick], rows: List[AlgoResult]) -> None:
    """Fill what needs our legacy rows: kernel matches, and the determinism of the
    algorithm PyTorch's legacy path ran."""
    for p in picks:
        p.same_kernels_as = match_kernels(p.kernels, rows)
        if p.api == "legacy" and p.legacy_algo and p.deterministic is None:
            row = next((r for r in rows if f"{r.algo_name} ({r.math_type})" == p.legacy_algo),
                       None)
            p.deterministic = row.deterministic if row else None


def match_kernels(kernels: List[str], rows: List[AlgoResult]) -> List[str]:
    """Our legacy rows whose launch runs exactly ``kernels``, as "ALGO (MATH)"."""
    return [f"{r.algo_name} ({r.math_type})" for r in rows
            if same_kernels(r.kernels, kernels)]


def pytorch_picks(problem: ConvProblem, directions: Iterable[str],
                  modes: Optional[List[ModeSpec]] = None, device: int = 0, seed: int = 0,
                  budget_ms: float = 100.0, timeout_s: float = 300.0, progress=None,
                  child_module: str = "cudnn_explorer.child") -> dict:
    """{direction: [PyTorchPick per mode]}. A mode whose child fails gets one PyTorchPick
    per direction with ``error`` set; the other modes' results are kept."""
    directions = list(directions)
    out = {d: [] for d in directions}
    for spec in modes or default_modes():
        if progress:
            progress(f"PyTorch child: {spec.label}")
        try:
            res = run_child(problem, directions, spec, device, seed, budget_ms, timeout_s,
                            child_module=child_module)
            for d, p in zip([x["direction"] for x in res["directions"]],
                            picks_from_result(spec, res)):
                out[d].append(p)
        except ChildError as e:
            for d in directions:
                out[d].append(PyTorchPick(label=spec.label, mode=spec.mode, api=spec.api,
                                          benchmark_limit=spec.benchmark_limit, error=str(e)))
    return out
