"""GPU tests: results checked against torch.nn.functional and independent cuDNN queries."""
import json

import pytest

from cudnn_explorer.core.problem import DIRECTIONS, ConvProblem

from conftest import run_cli

pytestmark = pytest.mark.gpu

ALGOS = {
    "fwd": {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
            "WINOGRAD", "WINOGRAD_NONFUSED"},
    "bwd-data": {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"},
    "bwd-filter": {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                   "FFT_TILING"},
}
MATHS = ["DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"]

CASES = {
    "2d": dict(shape="4,16,20,20", out_channels=32),
    "1d": dict(shape="4,16,50", out_channels=24, kernel=5),
    "3d": dict(shape="2,8,6,10,10", out_channels=16),
    "grouped": dict(shape="4,16,12,12", out_channels=32, groups=4),
    "depthwise": dict(shape="4,32,14,14", out_channels=32, groups=32),
    "dilated": dict(shape="2,8,17,17", out_channels=8, dilation=2, padding=2),
    "strided": dict(shape="2,8,17,17", out_channels=16, stride=2, kernel=5),
    "nhwc": dict(shape="4,16,12,12", out_channels=32, layout="nhwc"),
    "fp16": dict(shape="4,16,12,12", out_channels=32, dtype="float16"),
    "bf16": dict(shape="4,16,12,12", out_channels=32, dtype="bfloat16"),
    "fp32-strict": dict(shape="4,16,12,12", out_channels=32, tf32=False),
    "fp64": dict(shape="2,8,10,10", out_channels=8, dtype="float64"),
    "3d-grouped-nhwc-fp16": dict(shape="2,16,6,10,10", out_channels=16, groups=4,
                                 layout="nhwc", dtype="float16"),
}


def tolerance(p: ConvProblem, math_type: str) -> float:
    """Relative tolerance of one algorithm's output vs a float64 reference."""
    if p.dtype == "float64":
        return 1e-10
    if p.dtype == "float32":
        # FMA_MATH forbids TF32; DEFAULT/TENSOR_OP on float32 allow TF32 (10-bit mantissa).
        return 1e-5 if math_type == "FMA_MATH" else 5e-3
    return 1e-2 if p.dtype == "float16" else 4e-2  # bfloat16 has an 8-bit mantissa


@pytest.fixture(scope="module")
def explored():
    import cudnn_explorer

    cache = {}

    def get(name):
        if name not in cache:
            p = ConvProblem.create(**CASES[name])
            cache[name] = cudnn_explorer.explore(p, budget_ms=10, pytorch=False,
                                                     engines=False)
        return cache[name]

    return get


@pytest.mark.parametrize("case", sorted(CASES))
def test_algorithms_and_statuses(explored, case):
    exp = explored(case)
    assert [d.direction for d in exp.directions] == list(DIRECTIONS)
    for d in exp.directions:
        assert d.find, f"{case} {d.direction}: Find returned nothing"
        # find_returned: the most rows one Find call returned (one call per math type)
        assert d.find_returned <= len(d.find) and d.find_returned < d.find_requested
        for r in d.find:
            assert r.algo_name in ALGOS[d.direction]
            assert r.status.startswith("CUDNN_STATUS_") and r.math_type in MATHS
            assert (r.time_ms is not None) == r.ok
            if r.ok:
                assert r.time_ms > 0
        keys = [r.key for r in d.find]
        assert len(keys) == len(set(keys)), f"duplicate (algo, math) rows: {keys}"
        assert d.best() is not None, f"{case} {d.direction}: no algorithm succeeded"
        # The workspace table covers every algorithm under every math type.
        assert {(w.algo_name, w.math_type) for w in d.workspace} == {
            (a, m) for a in ALGOS[d.direction] for m in MATHS}
        assert d.workspace_given_bytes == d.workspace_needed_bytes == max(
            w.bytes or 0 for w in d.workspace)


@pytest.mark.parametrize("case", ["2d", "3d-grouped-nhwc-fp16", "depthwise", "1d"])
def test_find_workspace_equals_independent_query(explored, case):
    from cudnn_explorer.measure import native as _native, pipeline as gpu

    exp = explored(case)
    for d in exp.directions:
        t = gpu.make_tensors(exp.problem, d.direction)
        p = gpu.native_problem(exp.problem, t)
        for r in d.find:
            if not r.ok:
                continue
            q = _native.workspace_size(d.direction, p, r.algo, r.math_type)
            assert q.status == "CUDNN_STATUS_SUCCESS"
            assert q.bytes == r.workspace_bytes, (d.direction, r.algo_name, r.math_type)


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_successful_algorithm_matches_torch(explored, case):
    import torch

    from cudnn_explorer.measure import pipeline as gpu

    exp = explored(case)
    p = exp.problem
    checked = 0
    for d in exp.directions:
        tensors = None
        ref = None
        for r in d.find:
            if not r.ok:
                continue
            tensors, out = gpu.run_algorithm(p, d.direction, r.algo, r.math_type,
                                             tensors=tensors)
            if ref is None:
                ref = gpu.reference(p, d.direction, tensors)
            assert out.shape == ref.shape
            assert not torch.isnan(out).any(), f"{r.algo_name} left unwritten (NaN) elements"
            tol = tolerance(p, r.math_type)
            scale = ref.abs().max().item()
            torch.testing.assert_close(
                out.double(), ref, rtol=tol, atol=tol * scale,
                msg=lambda m: f"{case} {d.direction} {r.algo_name} {r.math_type}: {m}")
            rel = ((out.double() - ref).norm() / ref.norm()).item()
            assert rel < tol, (case, d.direction, r.algo_name, r.math_type, rel)
            checked += 1
    assert checked >= 3


def test_reference_agrees_with_functional_conv():
    import torch
    import torch.nn.functional as F

    from cudnn_explorer.measure import pipeline as gpu

    p = ConvProblem.create("2,8,9,9", out_channels=4, stride=2)
    t = gpu.make_tensors(p, "fwd")
    ref = gpu.reference(p, "fwd", t)
    direct = F.conv2d(t["x"].double().cpu(), t["w"].double().cpu(), stride=2, padding=1)
    torch.testing.assert_close(ref.cpu(), direct)


def test_workspace_cap_is_respected_and_explained():
    import cudnn_explorer

    p = ConvProblem.create("8,32,28,28", out_channels=64)
    exp = cudnn_explorer.explore(p, directions=["fwd"], max_workspace_mib=0, pytorch=False,
                                 engines=False)
    d = exp.direction("fwd")
    assert d.workspace_given_bytes == 0 and d.workspace_cap_bytes == 0
    assert all(r.workspace_bytes == 0 for r in d.find if r.ok)
    needy = [r for r in d.find if not r.ok and (d.workspace_for(r.algo, r.math_type) or 0) > 0]
    assert needy, "expected some algorithm that needs workspace"
    assert all("workspace" in r.note for r in needy)


def test_cudnn_refusal_is_an_exception_with_status():
    from cudnn_explorer.measure import pipeline as gpu
    from cudnn_explorer.core.errors import CudnnError

    p = ConvProblem.create("2,8,9,9", out_channels=4, kernel=1)
    with pytest.raises(CudnnError) as e:
        gpu.run_algorithm(p, "fwd", 6, "DEFAULT_MATH")  # WINOGRAD: 3x3 only
    assert e.value.status.startswith("CUDNN_STATUS_NOT_SUPPORTED")
    assert "x=[2,8,9,9]" in str(e.value)


def test_output_shape_mismatch_is_refused_before_cudnn_runs():
    import torch

    from cudnn_explorer.measure import native as _native
    from cudnn_explorer.core.errors import UserError

    x = torch.randn(1, 3, 8, 8, device="cuda")
    w = torch.randn(4, 3, 3, 3, device="cuda")
    y = torch.empty(1, 4, 7, 7, device="cuda")
    with pytest.raises(UserError, match="cuDNN computes"):
        _native.Problem(x, w, y, [1, 1], [1, 1], [1, 1], 1, "DEFAULT_MATH")


def test_environment_is_pytorchs_cudnn():
    import torch

    import cudnn_explorer

    env = cudnn_explorer.environment(0)
    assert env.cudnn_runtime == env.cudnn_torch == str(torch.backends.cudnn.version())
    assert env.gpu_name == torch.cuda.get_device_name(0)


def test_cli_json_on_gpu(tmp_path):
    out = tmp_path / "r.json"
    r = run_cli("--shape", "2,8,16,16", "--out-channels", "16", "--no-engines", "--json",
                str(out))
    assert r.returncode == 0, r.stderr
    d = json.loads(out.read_text())
    assert [x["direction"] for x in d["directions"]] == list(DIRECTIONS)
    assert all(x["engines"] is None for x in d["directions"])
    r = run_cli("--load", str(out))
    assert r.returncode == 0 and r.stdout.count("== ") == 3  # no engine summary


def test_cli_bad_device_is_one_line():
    r = run_cli("--shape", "1,3,8,8", "--device", "99")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "--device 99" in r.stderr


# ----------------------------------------------------------------------------- timing
def _timed(shape, **kw):
    from cudnn_explorer.core import stats
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import native as _native, pipeline as gpu

    p = ConvProblem.create(shape, out_channels=64, **kw)
    t = gpu.make_tensors(p, "fwd")
    np_ = gpu.native_problem(p, t)
    # algorithm 1: IMPLICIT_PRECOMP_GEMM
    res = _native.time_algorithm("fwd", np_, 1, p.math_type, TimingSpec(budget_ms=50.0))
    return res, stats.timing_stats(res.per_launch_ms)


def test_larger_problem_takes_longer():
    _, small = _timed("8,64,56,56")
    _, large = _timed("64,64,56,56")  # 8x the work
    assert large["median_ms"] > 4 * small["median_ms"], (small, large)


def test_timing_samples_and_method():
    res, st = _timed("16,64,56,56")
    assert res.method == "graph", res.note
    assert st["samples"] >= 5 and res.launches_per_sample >= 1
    assert st["min_ms"] <= st["p25_ms"] <= st["median_ms"] <= st["p75_ms"]
    assert 0.001 < st["median_ms"] < 100


def test_flush_l2_times_one_launch_per_sample():
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import native as _native, pipeline as gpu

    p = ConvProblem.create("8,64,56,56", out_channels=64)
    t = gpu.make_tensors(p, "fwd")
    res = _native.time_algorithm("fwd", gpu.native_problem(p, t), 1, p.math_type,
                                 TimingSpec(budget_ms=20.0, flush_l2=True))
    assert res.method == "eager+flush" and res.launches_per_sample == 1
    assert len(res.per_launch_ms) >= 5


@pytest.mark.parametrize("staged", [True, False])
def test_explore_retimes_every_successful_row_and_checks_the_finalists(staged):
    """Every row that ran is re-timed. Staged (the quick profile), the finalists are
    checked, and a row that left early only if it led its round as it was timed (Note
    [records checked]); unstaged (thorough), every row is checked."""
    import cudnn_explorer

    p = ConvProblem.create("8,32,28,28", out_channels=64)
    exp = cudnn_explorer.explore(p, budget_ms=20, pytorch=False, engines=False,
                                 staged=staged)
    for d in exp.directions:
        assert d.flops > 0 and d.min_bytes > 0 and d.find_wall_ms > 0
        for r in d.find:
            if not r.ok:
                assert r.timing is None
                continue
            t = r.timing
            assert t is not None and t.p25_ms <= t.median_ms <= t.p75_ms
            if r.left_round is None:  # a finalist, or every row unstaged
                assert r.output_finite is True and r.max_error is not None
            else:
                assert staged and r.correct is not False, (r.algo_name, r.max_error)
            assert r.peak_tflops is not None and 0 < d.peak_pct(r) < 100
        assert d.best() is not None and d.best().correct


def test_time_callable_matches_extension_for_the_same_kernels():
    """PyTorch-side timing helper vs the extension on the same algorithm: both are
    GPU-bound medians of the same kernels, so they must agree within 15%."""


    from cudnn_explorer.core import stats
    from cudnn_explorer.core.options import TimingSpec
    from cudnn_explorer.measure import native as _native, pipeline as gpu, timing

    p = ConvProblem.create("32,64,56,56", out_channels=64)
    t = gpu.make_tensors(p, "fwd")
    np_ = gpu.native_problem(p, t)
    ours = stats.timing_stats(
        _native.time_algorithm("fwd", np_, 1, "DEFAULT_MATH",
                               TimingSpec(budget_ms=50.0)).per_launch_ms)
    again = timing.time_callable(lambda: _native.run_algorithm("fwd", np_, 1, "DEFAULT_MATH"),
                                 TimingSpec(budget_ms=50.0))
    assert again.method == "graph"
    assert abs(again.median_ms / ours["median_ms"] - 1) < 0.15, (ours, again)
    # the eager wall time per call includes the host's cost: never below the GPU time
    assert again.eager is not None and again.eager.median_ms >= 0.9 * again.median_ms
