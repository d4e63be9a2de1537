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
    out[6, 0, 0, 0] = float("-inf")
    assert tensors.max_error(out, ref) == float("inf")
    out[6, 0, 0, 0], out[0, 0, 0, 0] = 0.0, float("nan")  # in the first slice, beside
    assert tensors.max_error(out, ref) == float("inf")  # finite larger errors
    assert tensors.max_error(torch.tensor(2.0), torch.tensor(4.0, dtype=torch.float64)) \
        == pytest.approx(0.5)  # a 0-d output


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


def test_the_reference_fits_on_the_gpu_when_it_takes_at_most_half_the_free_memory():
    from cudnn_explorer.core.problem import ConvProblem

    p = ConvProblem.create("32,3,224,224", kernel=3)  # the default problem
    need = tensors.tensor_bytes(p, check=True) - tensors.tensor_bytes(p)
    assert need == 8 * (32 * 3 * 224 * 224 + 64 * 3 * 3 * 3 + 32 * 64 * 224 * 224)
    assert tensors.reference_fits(p, None)  # the GPU cannot say: as always
    assert tensors.reference_fits(p, 2 * need)
    assert not tensors.reference_fits(p, 2 * need - 2)
    assert not tensors.reference_fits(p, 1019 << 20)  # the parent at 2 GiB free, on the H200
    assert tensors.reference_fits(p, 130 << 30)  # an H200 with nothing else on it
    big = ConvProblem.create("64,256,256,256", out_channels=256, kernel=3)  # 16 GiB of float64
    need = tensors.tensor_bytes(big, check=True) - tensors.tensor_bytes(big)
    assert tensors.reference_fits(big, need + (2 << 30))  # the headroom left: on the GPU
    assert not tensors.reference_fits(big, need + (2 << 30) - 1)


@pytest.mark.parametrize("free, oom, on_cpu", [(1 << 40, False, False), (1 << 10, False, True),
                                               (1 << 40, True, True)])
def test_a_reference_with_no_room_on_the_gpu_is_computed_on_the_cpu(monkeypatch, free, oom,
                                                                     on_cpu):
    """Note [reference on the CPU]: too little free memory, or an out-of-memory error on
    the GPU, and the same float64 reference comes from copies on the CPU."""
    from cudnn_explorer.core.problem import ConvProblem
    from cudnn_explorer.measure import native

    p = ConvProblem.create("2,4,6,6", out_channels=6, kernel=3, padding=1)
    xs, ws, ys, *_ = p.cudnn_params()
    g = torch.Generator().manual_seed(2)
    t = {k: torch.randn(s, generator=g) for k, s in (("x", xs), ("w", ws), ("y", ys))}
    want = tensors.reference(p, "bwd-filter", t)
    real, calls, released = tensors.reference, [], []

    def reference(problem, direction, ts, on_cpu=False):
        calls.append(on_cpu)
        if oom and not on_cpu:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(problem, direction, ts, on_cpu=on_cpu)

    monkeypatch.setattr(tensors, "reference", reference)
    monkeypatch.setattr(native, "free_bytes", lambda device: free)
    monkeypatch.setattr(native, "release_cached_memory", lambda: released.append(1))
    got, cpu = tensors.fitting_reference(p, "bwd-filter", t, 0)
    assert cpu is on_cpu and calls == ([False, True] if oom else [on_cpu])
    assert released == ([1] if oom else [])
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert got.device.type == "cpu" and tensors.max_error(t["w"], got) < 10
