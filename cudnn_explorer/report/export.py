"""CSV export: one row per legacy Find result, and reading it back. Pure Python."""
from __future__ import annotations

import csv
import io
from typing import List, Optional

from ..core.errors import UserError
from ..core.records import AlgoResult, Exploration, Timing

__all__ = ["CSV_COLUMNS", "rows_to_csv", "rows_from_csv"]

CSV_COLUMNS = [
    "schema_version", "direction", "rank", "best", "algo", "algo_name", "math_type", "status",
    "status_code", "time_ms", "median_ms", "p25_ms", "p75_ms", "min_ms", "spread", "samples",
    "launches_per_sample", "warmup_launches", "method", "timing_note", "eager_ms",
    "eager_p25_ms", "eager_p75_ms", "eager_min_ms", "eager_spread", "eager_samples",
    "eager_calls_per_sample", "max_error", "tolerance",
    "correct", "output_finite", "tflops", "gbs", "peak_tflops", "peak_unit", "peak_pct",
    "workspace_bytes",
    "deterministic", "heuristic_rank", "note", "found_under", "pytorch_candidate",
    "input_shape", "weight_shape", "output_shape", "padding", "stride", "dilation", "groups",
    "dtype", "layout", "tf32", "descriptor_math_type", "workspace_given_bytes", "gpu_name",
    "compute_capability", "cudnn_version", "torch_version",
]


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
    """One CSV row per Find result, ranked per direction, with the problem and the
    environment repeated on every row so that files can be concatenated."""
    p, e = exp.problem, exp.environment

    def x(t):
        return "x".join(map(str, t))

    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for d in exp.directions:
        best = d.best()
        for rank, r in enumerate(d.ranked(), 1):
            hr = d.heuristic_rank(r)
            w.writerow({
                "schema_version": exp.schema_version, "direction": d.direction,
                "rank": rank if r.ok else "", "best": "yes" if r is best else "",
                "algo": r.algo, "algo_name": r.algo_name, "math_type": r.math_type,
                "status": r.status, "status_code": r.status_code,
                "time_ms": _num(r.time_ms),
                **_timing_cols(r.timing),
                "max_error": _num(r.max_error), "tolerance": _num(r.tolerance),
                "correct": {None: "", True: "yes", False: "no"}[r.correct],
                "output_finite": {None: "", True: "yes", False: "no"}[r.output_finite],
                "tflops": _num(d.tflops(r)), "gbs": _num(d.gbs(r)),
                "peak_tflops": _num(r.peak_tflops), "peak_unit": r.peak_unit,
                "peak_pct": _num(d.peak_pct(r)),
                "workspace_bytes": r.workspace_bytes,
                "deterministic": "yes" if r.deterministic else "no",
                "heuristic_rank": "" if hr is None else hr, "note": r.note,
                "found_under": r.found_under,
                "pytorch_candidate": {None: "", True: "yes", False: "no"}[r.pytorch_candidate],
                "input_shape": x(p.input_shape), "weight_shape": x(p.weight_shape),
                "output_shape": x(p.output_shape), "padding": x(p.padding),
                "stride": x(p.stride), "dilation": x(p.dilation), "groups": p.groups,
                "dtype": p.dtype, "layout": p.layout,
                "tf32": "" if p.tf32 is None else ("on" if p.tf32 else "off"),
                "descriptor_math_type": d.math_type,
                "workspace_given_bytes": d.workspace_given_bytes, "gpu_name": e.gpu_name,
                "compute_capability": e.compute_capability, "cudnn_version": e.cudnn_runtime,
                "torch_version": e.torch_version,
            })
    return buf.getvalue()


def rows_from_csv(text: str) -> List[dict]:
    """Read rows_to_csv output back: each dict has the CSV columns, plus ``result``, the
    row as an AlgoResult."""
    reader = csv.DictReader(io.StringIO(text))
    missing = [c for c in ("direction", "algo", "algo_name", "math_type", "status")
               if c not in (reader.fieldnames or [])]
    if missing:
        raise UserError(f"not a cudnn_explorer CSV: missing columns {', '.join(missing)}")
    out = []
    for row in reader:
        row = dict(row)
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
