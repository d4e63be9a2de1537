"""The native module's CPU-side behaviour: metadata, boundary checks, error types."""
import pytest

from cudnn_explorer.core.errors import UserError

pytestmark = pytest.mark.ext


def test_build_info_matches_running_torch():
    import torch

    from cudnn_explorer.measure import native as _native

    b = _native.build_info()
    assert set(b) == {"torch", "cudnn", "cuda_runtime"}
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
    with pytest.raises(ValueError, match="valid: fwd, bwd-data, bwd-filter"):
        C.algo_name("sideways", 0)


def test_cpu_tensors_are_refused_cleanly():
    import torch

    from cudnn_explorer.measure import native as _native

    x = torch.zeros(1, 3, 8, 8)
    with pytest.raises(UserError, match="must be CUDA tensors"):
        _native.Problem(x, torch.zeros(4, 3, 3, 3), torch.zeros(1, 4, 8, 8), [1, 1], [1, 1],
                        [1, 1], 1, "DEFAULT_MATH")
