"""Realistic fake results (shaped like the native module's output) for CPU tests."""
from cudnn_explorer.problem import ConvProblem
from cudnn_explorer.records import (MIB, AlgoResult, DirectionResult, Environment, Exploration,
                                    WorkspaceEntry)

OK = "CUDNN_STATUS_SUCCESS"
NS = "CUDNN_STATUS_NOT_SUPPORTED"


def algo(i, name, math, status=OK, t=None, ws=0, det=True):
    return AlgoResult(algo=i, algo_name=name, math_type=math, status=status,
                      status_code=0 if status == OK else 3000, time_ms=t, workspace_bytes=ws,
                      deterministic=det)


def fwd_result(cap=None):
    find = [
        algo(1, "IMPLICIT_PRECOMP_GEMM", "TENSOR_OP_MATH", t=0.283, ws=3 * MIB // 2),
        algo(0, "IMPLICIT_GEMM", "DEFAULT_MATH", t=0.512, ws=0),
        algo(2, "GEMM", "DEFAULT_MATH", t=0.401, ws=40 * MIB),
        algo(5, "FFT_TILING", "DEFAULT_MATH", status="CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE",
             ws=900 * MIB),
        algo(6, "WINOGRAD", "DEFAULT_MATH", status=NS),
    ]
    heur = [algo(1, "IMPLICIT_PRECOMP_GEMM", "TENSOR_OP_MATH", ws=3 * MIB // 2),
            algo(0, "IMPLICIT_GEMM", "DEFAULT_MATH")]
    ws = []
    names = ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
             "WINOGRAD", "WINOGRAD_NONFUSED"]
    sizes = {0: 0, 1: 3 * MIB // 2, 2: 40 * MIB, 5: 900 * MIB}
    for i, n in enumerate(names):
        for m in ("DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"):
            b = sizes.get(i)
            ws.append(WorkspaceEntry(i, n, m, OK if b is not None else NS, b))
    given = 900 * MIB if cap is None else min(cap, 900 * MIB)
    d = DirectionResult("fwd", "DEFAULT_MATH", find, heur, ws, 900 * MIB, given, cap, 32, 5)
    d.annotate()
    return d


def exploration(cap=None):
    p = ConvProblem.create("32,3,224,224", kernel=3)
    env = Environment(gpu_name="NVIDIA H200", compute_capability="9.0", torch_version="2.11.0",
                      torch_cuda="13.0", cudnn_torch="91900", cudnn_runtime="91900",
                      cudnn_built="91900", torch_built="2.11.0", cuda_runtime="13000",
                      cuda_driver="13000")
    return Exploration(p, env, [fwd_result(cap)], tool_version="0.1.0",
                       created="2026-11-30T00:00:00+00:00")


def timing(median, spread=0.02, method="graph"):
    from cudnn_explorer.records import Timing

    return Timing(median_ms=median, p25_ms=median * (1 - spread / 2),
                  p75_ms=median * (1 + spread / 2), min_ms=median * 0.97, samples=50,
                  launches_per_sample=10, method=method, spread=spread, warmup_launches=12)


def retimed_exploration():
    """fwd rows re-timed and checked: Find's order differs from the steady-state one, and
    the fastest row by median is WRONG."""
    from cudnn_explorer.records import Measurement

    e = exploration()
    d = e.directions[0]
    d.flops = 2 * 32 * 64 * 224 * 224 * 3 * 9
    d.min_bytes = (32 * 3 * 224 * 224 + 64 * 27 + 32 * 64 * 224 * 224) * 4
    rows = {r.algo_name: r for r in d.find}
    rows["IMPLICIT_PRECOMP_GEMM"].timing = timing(0.210)        # Find said 0.283: 1.35x
    rows["IMPLICIT_GEMM"].timing = timing(0.500, spread=0.25)   # noisy
    rows["GEMM"].timing = timing(0.150)                         # fastest, but WRONG
    for r in (rows["IMPLICIT_PRECOMP_GEMM"], rows["IMPLICIT_GEMM"], rows["GEMM"]):
        r.tolerance, r.max_error, r.output_finite = 1e-2, 1e-3, True
        r.peak_tflops, r.peak_unit = 494.7, "TF32 tensor core"
    rows["GEMM"].max_error = 0.5
    e.measurement = Measurement(retimed=True, budget_ms=100, reference="float64 reference",
                                peak_source="test table", bandwidth_gbs=4800.0)
    return e
