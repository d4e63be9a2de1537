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


class _Untouchable:
    """A direction's output: the reference must not read it, nor copy it to float64."""

    def __getattr__(self, name):
        raise AssertionError(f"the reference used the output ({name})")


@pytest.mark.parametrize("direction", ["fwd", "bwd-data", "bwd-filter"])
def test_the_reference_copies_only_the_inputs(direction):
    from cudnn_explorer.core.problem import ConvProblem

    p = ConvProblem.create("2,4,6,6", out_channels=6, kernel=3, padding=1, stride=2)
    xs, ws, ys, *_ = p.cudnn_params()
    g = torch.Generator().manual_seed(1)
    t = {k: torch.randn(s, generator=g) for k, s in (("x", xs), ("w", ws), ("y", ys))}
    x, w, y = (t[k].double() for k in ("x", "w", "y"))
    want = {"fwd": lambda: torch.nn.functional.conv2d(x, w, stride=2, padding=1),
            "bwd-data": lambda: torch.nn.grad.conv2d_input(list(xs), w, y, stride=2, padding=1),
            "bwd-filter": lambda: torch.nn.grad.conv2d_weight(x, list(ws), y, stride=2,
                                                              padding=1)}[direction]()
    t[tensors.OUTPUT_OF[direction]] = _Untouchable()
    got = tensors.reference(p, direction, t)
    assert got.dtype == torch.float64
    torch.testing.assert_close(got, want)
