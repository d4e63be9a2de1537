"""The native module's CPU-side behaviour: metadata, boundary checks, error types."""
import pytest

from cudnn_explorer.core.errors import UserError

pytestmark = pytest.mark.ext


def test_build_info_matches_running_torch():
    import torch

    from cudnn_explorer.measure import native as _native

    b = _native.build_info()
    assert set(b) == {"torch", "cudnn", "cuda_runtime", "cudnn_frontend"}
    if _native.frontend_available():  # the headers' version, e.g. 13200 for 1.32.0
        assert int(b["cudnn_frontend"]) >= 10000
    assert b["torch"] == torch.__version__, "extension built for another torch; rebuild it"
    assert int(b["cudnn"]) >= 90000
    r = _native.runtime_info()
    assert int(r["cudnn"]) >= 90000 and r["cudnn"] == str(torch.backends.cudnn.version())


def test_algo_names_follow_cudnn_enums():
    from cudnn_explorer.measure import native as _native

    C = _native.load()
    assert [C.algo_name("fwd", i) for i in range(8)] == [
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD", "WINOGRAD_NONFUSED"]
    assert C.algo_name("bwd-filter", 3) == "ALGO_3"
    assert C.algo_name("bwd-data", 5) == "WINOGRAD_NONFUSED"
    assert C.algo_name("fwd", 99) == "ALGO_99"
    with pytest.raises(C.NativeError, match="valid: fwd, bwd-data, bwd-filter") as e:
        C.algo_name("sideways", 0)
    assert (e.value.kind, e.value.status) == ("argument", "INVALID_ARGUMENT")


def test_every_native_failure_maps_to_one_project_error():
    """The one native error type, by kind and status, to the project's error classes."""
    from cudnn_explorer.core import errors
    from cudnn_explorer.measure import native as _native

    C = _native.load()

    def native_error(kind, status, text="x failed"):
        e = C.NativeError(text)
        e.kind, e.status, e.call = kind, status, "x()"
        return e

    cases = [(("argument", "INVALID_ARGUMENT"), errors.UserError),
             (("cudnn", "CUDNN_STATUS_NOT_SUPPORTED"), errors.CudnnError),
             (("cudnn", "CUDNN_STATUS_ALLOC_FAILED"), errors.GpuMemoryError),
             (("frontend", "GRAPH_NOT_SUPPORTED"), errors.CudnnError),
             (("cuda", "cudaErrorMemoryAllocation"), errors.GpuMemoryError),
             (("cuda", "cudaErrorInsufficientDriver"), errors.MissingDependencyError),
             (("cuda", "cudaErrorIllegalAddress"), errors.GpuError),
             (("internal", "CHECK_FAILED"), errors.ExplorerError)]
    for (kind, status), cls in cases:
        with pytest.raises(cls) as got:
            _native.call("doing x", lambda: (_ for _ in ()).throw(native_error(kind, status)))
        assert type(got.value) is cls and "doing x" in str(got.value)
        assert got.value.exit_code in (1, 2, 3)
    with pytest.raises(errors.CudnnError) as got:
        _native.call("doing x", lambda: (_ for _ in ()).throw(
            native_error("frontend", "GRAPH_NOT_SUPPORTED")))
    assert got.value.status == "GRAPH_NOT_SUPPORTED"
    with pytest.raises(errors.GpuError, match="the native call failed doing x: boom"):
        _native.call("doing x", lambda: (_ for _ in ()).throw(RuntimeError("boom")))


def test_cpu_tensors_are_refused_cleanly():
    import torch

    from cudnn_explorer.measure import native as _native

    x = torch.zeros(1, 3, 8, 8)
    with pytest.raises(UserError, match="must be CUDA tensors"):
        _native.Problem(x, torch.zeros(4, 3, 3, 3), torch.zeros(1, 4, 8, 8), [1, 1], [1, 1],
                        [1, 1], 1, "DEFAULT_MATH")
