"""CSV export: every measured row of an exploration, told apart by ``kind``: "legacy"
(one per Find result), "engine" (one per engine config tried) and "pytorch" (one per
PyTorch mode); and reading the legacy rows back. Pure Python."""
from __future__ import annotations

import csv
import io
from typing import List, Optional

from ..core.errors import UserError
from ..core.records import AlgoResult, Timing
from ..core.exploration import Exploration

__all__ = ["CSV_COLUMNS", "rows_to_csv", "rows_from_csv"]

CSV_COLUMNS = [
    "schema_version", "kind", "direction", "rank", "best", "algo", "algo_name", "math_type", "status",
    "status_code", "time_ms", "median_ms", "p25_ms", "p75_ms", "min_ms", "spread", "samples",
    "launches_per_sample", "warmup_launches", "method", "timing_note", "eager_ms",
    "eager_p25_ms", "eager_p75_ms", "eager_min_ms", "eager_spread", "eager_samples",
    "eager_calls_per_sample", "max_error", "tolerance",
    "correct", "output_finite", "tflops", "gbs", "peak_tflops", "peak_unit", "peak_pct",
    "workspace_bytes",
    "deterministic", "heuristic_rank", "note", "found_under", "pytorch_candidate", "mode",
    "input_shape", "weight_shape", "output_shape", "padding", "stride", "dilation", "groups",
    "dtype", "layout", "tf32", "descriptor_math_type", "workspace_given_bytes", "gpu_name",
    "compute_capability", "cudnn_version", "torch_version",
]


def _yn(v: Optional[bool]) -> str:
    return {None: "", True: "yes", False: "no"}[v]


def _num(v) -> str:
    return "" if v is None else repr(float(v))


_TIMING_FLOATS = ("median_ms", "p25_ms", "p75_ms", "min_ms", "spread")
_TIMING_INTS = ("samples", "launches_per_sample", "warmup_launches")


_EAGER = ("eager_ms", "eager_p25_ms", "eager_p75_ms", "eager_min_ms", "eager_spread",
          "eager_samples", "eager_calls_per_sample")


def _timing_cols(t: Optional[Timing]) -> dict:
    if t is None:
        return {k: "" for k in _TIMING_FLOATS + _TIMING_INTS + ("method", "timing_note")
                + _EAGER}
    out = {k: repr(float(getattr(t, k))) for k in _TIMING_FLOATS}
    out.update({k: getattr(t, k) for k in _TIMING_INTS})
    out.update(method=t.method, timing_note=t.note)
    e = t.eager
    out.update(dict(zip(_EAGER, ("",) * len(_EAGER) if e is None else (
        repr(e.median_ms), repr(e.p25_ms), repr(e.p75_ms), repr(e.min_ms), repr(e.spread),
        e.samples,
        e.launches_per_sample))))
    return out


def _timing_from_row(row: dict) -> Optional[Timing]:
    if not row.get("median_ms"):
        return None
    eager = None
    if row.get("eager_ms"):
        med, p25, p75, lo, spread = (float(row[k]) for k in _EAGER[:5])
        eager = Timing(median_ms=med, p25_ms=p25, p75_ms=p75, min_ms=lo, spread=spread,
                       samples=int(row["eager_samples"]),
                       launches_per_sample=int(row["eager_calls_per_sample"]),
                       method="wall")
    return Timing(**{k: float(row[k]) for k in _TIMING_FLOATS},
                  **{k: int(row[k]) for k in _TIMING_INTS},
                  method=row["method"], note=row.get("timing_note", ""), eager=eager)


def _opt_float(v: str) -> Optional[float]:
    return float(v) if v not in (None, "") else None


def rows_to_csv(exp: Exploration) -> str:
    """Per direction: the Find results ranked (kind "legacy"), then every engine config
    tried, fastest first ("engine": ``algo`` is the engine id, ``algo_name`` the full tag),
    then PyTorch's pick in each mode ("pytorch": ``mode`` is the mode's label,
    ``algo_name`` the plan or algorithm it ran). The problem and the environment are
    repeated on every row so that files can be concatenated."""
    p, e = exp.problem, exp.environment
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for d in exp.directions:
        best = d.best()
        for rank, r in enumerate(d.ranked(), 1):
            hr = d.heuristic_rank(r)
            w.writerow({
                "schema_version": exp.schema_version, "kind": "legacy",
                "direction": d.direction, "rank": rank if r.ok else "",
                "best": "yes" if r is best else "",
                "algo": r.algo, "algo_name": r.algo_name, "math_type": r.math_type,
                "status": r.status, "status_code": r.status_code,
                "time_ms": _num(r.time_ms),
                **_timing_cols(r.timing),
                "max_error": _num(r.max_error), "tolerance": _num(r.tolerance),
                "correct": _yn(r.correct),
                "output_finite": _yn(r.output_finite),
                "tflops": _num(d.tflops(r)), "gbs": _num(d.gbs(r)),
                "peak_tflops": _num(r.peak_tflops), "peak_unit": r.peak_unit,
                "peak_pct": _num(d.peak_pct(r)),
                "workspace_bytes": r.workspace_bytes,
                "deterministic": "yes" if r.deterministic else "no",
                "heuristic_rank": "" if hr is None else hr, "note": r.note,
                "found_under": r.found_under,
                "pytorch_candidate": _yn(r.pytorch_candidate),
                **_common(p, e, d),
            })
        common = _common(p, e, d)
        if d.engines is not None:
            ranked = {id(c): i for i, c in enumerate(d.engines.ranked(), 1)}
            eng_best = d.engines.best(allowed_only=True)
            for c in sorted(d.engines.configs, key=lambda c: (c.time is None, c.time or 0)):
                w.writerow({**common, **_timing_cols(c.timing),
                            "schema_version": exp.schema_version, "kind": "engine",
                            "direction": d.direction, "rank": ranked.get(id(c), ""),
                            "best": "yes" if c is eng_best else "", "algo": c.engine,
                            "algo_name": c.tag, "status": c.status,
                            "max_error": _num(c.max_error), "tolerance": _num(c.tolerance),
                            "correct": _yn(c.correct),
                            "output_finite": _yn(c.output_finite),
                            "workspace_bytes": "" if c.workspace_bytes is None
                            else c.workspace_bytes,
                            "deterministic": "no" if "NONDETERMINISTIC" in c.numeric_notes
                            else "yes",
                            "note": "; ".join(filter(None, [
                                ",".join(c.numeric_notes), "" if c.allowed
                                else "excluded by PyTorch's rules", c.message[:200]]))})
        for pick in d.pytorch:
            w.writerow({**common, **_timing_cols(pick.steady),
                        "schema_version": exp.schema_version, "kind": "pytorch",
                        "direction": d.direction, "mode": pick.label,
                        "algo_name": pick.engine_tag or pick.legacy_algo or "",
                        "status": "OK" if pick.ok else "failed", "note": pick.error[:200],
                        "max_error": _num(pick.max_error), "tolerance": _num(pick.tolerance),
                        "correct": _yn(pick.correct),
                        "output_finite": _yn(pick.output_finite),
                        "workspace_bytes": "" if pick.plan_workspace_bytes is None
                        else pick.plan_workspace_bytes,
                        "deterministic": _yn(pick.deterministic)})
    return buf.getvalue()


def _common(p, e, d) -> dict:
    """The columns every row of a direction shares: the problem and the environment."""
    def x(t):
        return "x".join(map(str, t))

    return {"input_shape": x(p.input_shape), "weight_shape": x(p.weight_shape),
            "output_shape": x(p.output_shape), "padding": x(p.padding),
            "stride": x(p.stride), "dilation": x(p.dilation), "groups": p.groups,
            "dtype": p.dtype, "layout": p.layout,
            "tf32": "" if p.tf32 is None else ("on" if p.tf32 else "off"),
            "descriptor_math_type": d.math_type,
            "workspace_given_bytes": d.workspace_given_bytes, "gpu_name": e.gpu_name,
            "compute_capability": e.compute_capability, "cudnn_version": e.cudnn_runtime,
            "torch_version": e.torch_version}


def rows_from_csv(text: str) -> List[dict]:
    """Read the legacy rows of rows_to_csv output back: each dict has the CSV columns,
    plus ``result``, the row as an AlgoResult."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("direction", "algo", "algo_name", "math_type", "status")
               if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"not a cudnn_explorer CSV: missing columns {', '.join(missing)}")
    out = []
    for row in reader:
        row = dict(row)
        if row.get("kind", "legacy") != "legacy":  # engine configs and PyTorch's picks
            continue
        row["result"] = AlgoResult(
            algo=int(row["algo"]), algo_name=row["algo_name"], math_type=row["math_type"],
            status=row["status"], status_code=int(row["status_code"]),
            time_ms=_opt_float(row["time_ms"]),
            workspace_bytes=int(row["workspace_bytes"]),
            deterministic=row["deterministic"] == "yes", note=row.get("note", ""),
            timing=_timing_from_row(row), max_error=_opt_float(row.get("max_error")),
            tolerance=_opt_float(row.get("tolerance")),
            output_finite={"yes": True, "no": False}.get(row.get("output_finite", "")),
            peak_tflops=_opt_float(row.get("peak_tflops")), peak_unit=row.get("peak_unit", ""),
        )
        out.append(row)
    return out
