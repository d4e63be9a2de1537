"""The output check on the CPU: max_error in slices equals the whole-tensor formula."""
import pytest

torch = pytest.importorskip("torch")

from cudnn_explorer.measure import tensors  # noqa: E402


@pytest.mark.parametrize("chunk", [1, 40, 100, 1 << 24])
def test_max_error_in_slices_is_the_whole_tensor_formula(monkeypatch, chunk):
    monkeypatch.setattr(tensors, "_CHUNK_ELEMENTS", chunk)
    g = torch.Generator().manual_seed(0)
    out = torch.randn(7, 3, 5, 5, generator=g)
    ref = out.double() + 1e-3 * torch.randn(7, 3, 5, 5, generator=g, dtype=torch.float64)
    ref[5, 1, 2, 3] = 40.0  # the largest |ref| and the largest error in a late slice
    whole = ((out.double() - ref).abs().max() / ref.abs().max()).item()
    assert tensors.max_error(out, ref) == pytest.approx(whole, rel=1e-12)
    out[6, 0, 0, 0] = float("nan")
    assert tensors.max_error(out, ref) == float("inf")
