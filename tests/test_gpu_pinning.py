"""The pinned convolution op on the GPU: numerics first. Every pinned direction's result
equals PyTorch's own, and each test checks that the pinned plans really ran (the op's own
counts), so that a silent fallback cannot pass it."""
import contextlib
import dataclasses

import pytest

from conftest import requires_cuda
from pinning_helpers import entry, heuristic_configs, heuristic_plans, plan_file

pytestmark = requires_cuda

DTYPE = {"float32": "float32", "float16": "float16", "bfloat16": "bfloat16",
         "float64": "float64"}

# (relative) tolerance per arithmetic: the largest error over the largest magnitude
TOL = {"float64": 1e-10, "float32": 2e-5, "tf32": 5e-3, "float16": 5e-3, "bfloat16": 3e-2}

# id: (input shape, out channels, kernel, stride, padding, dilation, groups, dtype, layout,
#      tf32, transposed)
CASES = {
    "fp32-tf32-nchw": ((4, 16, 20, 20), 32, 3, 1, 1, 1, 1, "float32", "nchw", True, False),
    "fp32-strict-nchw": ((4, 16, 20, 20), 32, 3, 1, 1, 1, 1, "float32", "nchw", False, False),
    "fp32-nhwc-stride2": ((4, 16, 21, 19), 24, 3, 2, 1, 1, 1, "float32", "nhwc", True, False),
    "fp16-nhwc": ((8, 32, 28, 28), 64, 3, 1, 1, 1, 1, "float16", "nhwc", None, False),
    "fp16-nchw-1x1": ((8, 64, 14, 14), 128, 1, 1, 0, 1, 1, "float16", "nchw", None, False),
    "bf16-nhwc-1x1-stride2": ((8, 64, 28, 28), 128, 1, 2, 0, 1, 1, "bfloat16", "nhwc", None,
                              False),
    "fp64-nchw": ((2, 6, 11, 11), 8, 3, 1, 1, 1, 1, "float64", "nchw", None, False),
    "fp32-1d": ((4, 16, 50), 24, 5, 1, 2, 1, 1, "float32", "nchw", True, False),
    "fp16-1d-dilated": ((4, 16, 64), 16, 3, 1, 2, 2, 1, "float16", "nchw", None, False),
    "fp32-3d": ((2, 8, 8, 10, 10), 16, 3, 1, 1, 1, 1, "float32", "nchw", True, False),
    "fp16-3d-nhwc": ((2, 16, 6, 12, 12), 16, 3, 1, 1, 1, 1, "float16", "nhwc", None, False),
    "fp32-groups": ((4, 32, 16, 16), 64, 3, 1, 1, 1, 4, "float32", "nchw", True, False),
    "fp16-depthwise-nhwc": ((8, 64, 28, 28), 64, 3, 1, 1, 1, 64, "float16", "nhwc", None,
                            False),
    "fp32-depthwise-stride2": ((4, 32, 17, 17), 32, 5, 2, 2, 1, 32, "float32", "nchw", True,
                               False),
    "fp32-dilated": ((4, 16, 24, 24), 16, 3, 1, 2, 2, 1, "float32", "nchw", True, False),
    "fp32-transposed": ((4, 16, 10, 10), 8, 3, 2, 1, 1, 1, "float32", "nchw", True, True),
    "fp16-transposed-nhwc-groups": ((4, 32, 9, 9), 32, 4, 2, 1, 1, 2, "float16", "nhwc", None,
                                    True),
}


@contextlib.contextmanager
def tf32_mode(on):
    import torch

    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = True if on is None else on
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def tensors(case, seed=0):
    """(x, w, b, problem, call args) for one case: the tensors PyTorch's layer would get."""
    import torch

    from cudnn_explorer.model.tracer import problem_of

    shape, k_out, k, s, p, d, g, dtype, layout, tf32, transposed = case
    n = len(shape) - 2
    dt = getattr(torch, dtype)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(shape, generator=gen, device="cuda").to(dt)
    c = shape[1]
    wshape = (c, k_out // g, *[k] * n) if transposed else (k_out, c // g, *[k] * n)
    w = (torch.randn(wshape, generator=gen, device="cuda") / (c * k ** n / g) ** 0.5).to(dt)
    b = torch.randn(k_out, generator=gen, device="cuda").to(dt)
    if layout == "nhwc":
        fmt = torch.channels_last if n == 2 else torch.channels_last_3d
        x, w = x.contiguous(memory_format=fmt), w.contiguous(memory_format=fmt)
    stride, pad, dil = [s] * n, [p] * n, [d] * n
    out_pad = [1 if transposed and s > 1 else 0] * n
    problem = problem_of(x, w, stride, pad, dil, g, True if tf32 is None else tf32,
                         transposed, out_pad)
    return x, w, b, problem, (stride, pad, dil, transposed, out_pad, g)


def run(fn, x, w, b, grad_seed=1):
    """fn's output and its input, weight and bias gradients for one random grad_output."""
    import torch

    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_()
    b = b.detach().clone().requires_grad_()
    out = fn(x, w, b)
    gen = torch.Generator(device="cuda").manual_seed(grad_seed)
    go = torch.randn(out.shape, generator=gen, device="cuda").to(out.dtype)
    out.backward(go)
    return out.detach(), x.grad, w.grad, b.grad


def close(a, b, tol, what):
    import torch

    assert a.shape == b.shape, what
    scale = b.double().abs().max().item() or 1.0
    torch.testing.assert_close(a.double(), b.double(), rtol=tol, atol=tol * scale, msg=lambda m:
                               f"{what}: {m}")


def aten(args):
    import torch

    stride, pad, dil, transposed, out_pad, g = args
    return lambda x, w, b: torch.ops.aten.convolution(x, w, b, stride, pad, dil, transposed,
                                                      out_pad, g)


def pinned_op(args):
    from cudnn_explorer.pinning.op import ops

    stride, pad, dil, transposed, out_pad, g = args
    conv = ops().conv
    return lambda x, w, b: conv(x, w, b, stride, pad, dil, transposed, out_pad, g)


@pytest.mark.parametrize("rank", [0, 1, 2])
@pytest.mark.parametrize("name", sorted(CASES))
def test_every_pinned_direction_equals_pytorchs(name, rank):
    """Forward, input gradient and weight gradient of a pinned call equal PyTorch's, for
    the configs at heuristic ranks 0, 1 and 2 (three engines where cuDNN lists them)."""
    import torch

    from cudnn_explorer.pinning import op

    case = CASES[name]
    tf32 = case[9]
    with tf32_mode(tf32):
        x, w, b, problem, args = tensors(case)
        # PyTorch's rule: no tensor-core (TF32) configs for float32 with TF32 off
        strict = case[7] == "float32" and not tf32
        plans = heuristic_plans([problem], rank=rank,
                                accept=(lambda notes: "TENSOR_CORE" not in notes) if strict
                                else None)
        assert len(plans.entries) == 3, [e.tag for e in plans.entries]
        op.load_plans(plans)
        got = run(pinned_op(args), x, w, b)
        counts = op.pin_counts(reset=True)
        want = run(aten(args), x, w, b)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    assert counts.pinned_calls == 3
    assert sorted(d.ran.split("eng", 1)[1] for d in counts.directions) == \
        sorted(e.tag.split("eng", 1)[1] for e in plans.entries)
    tol = TOL["tf32" if case[7] == "float32" and tf32 else case[7]]
    for what, a, ref in zip(("output", "input gradient", "weight gradient", "bias gradient"),
                            got, want):
        close(a, ref, tol, f"{name} rank {rank} {what} ({', '.join(e.tag for e in plans.entries)})")
        fmt = torch.channels_last if a.dim() == 4 else torch.channels_last_3d
        if case[8] == "nhwc" and a.dim() >= 4 and what != "bias gradient":
            assert a.is_contiguous(memory_format=fmt), what


def test_float64_gradcheck_through_pinned_plans():
    import torch

    from cudnn_explorer.pinning import op

    case = ((2, 3, 6, 6), 4, 3, 1, 1, 1, 1, "float64", "nchw", None, False)
    x, w, b, problem, args = tensors(case)
    op.load_plans(heuristic_plans([problem]))
    fn = pinned_op(args)
    inputs = tuple(t.detach().clone().requires_grad_() for t in (x, w, b))
    assert torch.autograd.gradcheck(fn, inputs)
    counts = op.pin_counts(reset=True)
    assert counts.pinned_calls > 0 and counts.fallback_calls == 0, counts.fallbacks


def test_opcheck_with_pinned_plans():
    import torch

    from cudnn_explorer.pinning import op

    case = CASES["fp16-nhwc"]
    x, w, b, problem, args = tensors(case)
    op.load_plans(heuristic_plans([problem]))
    stride, pad, dil, transposed, out_pad, g = args
    for t in (x, w, b):
        t.requires_grad_()
    torch.library.opcheck(op.ops().conv, (x, w, b, stride, pad, dil, transposed, out_pad, g))
    assert op.pin_counts(reset=True).pinned_calls > 0


def test_uncovered_and_refused_calls_fall_back_and_are_counted():
    """A call the file does not cover runs PyTorch's own convolution (counted, with its
    reason); a float32 plan with tensor cores is refused when TF32 is off."""
    from cudnn_explorer.pinning import op

    case = CASES["fp32-tf32-nchw"]
    with tf32_mode(True):
        x, w, b, problem, args = tensors(case)
        tc = [c for c in heuristic_configs(problem, "fwd") if "TENSOR_CORE" in c[1]]
    if not tc:
        pytest.skip("cuDNN lists no tensor-core forward config for this TF32 problem")
    op.load_plans(plan_file([entry(problem, "fwd", tc[0][0], tc[0][1])]))
    with tf32_mode(False):  # the key has TF32 off: not the file's
        got = run(pinned_op(args), x, w, b)
        counts = op.pin_counts(reset=True)
        want = run(aten(args), x, w, b)
    assert counts.pinned_calls == 0 and counts.fallback_calls == 3
    assert any("TF32 allowed only" in d.reason for d in counts.directions), counts.directions
    for a, ref in zip(got, want):
        close(a, ref, TOL["float32"], "fallback")
    # a file keyed TF32-off that names a tensor-core config: refused when it is built
    strict = dataclasses.replace(problem, tf32=False)
    op.load_plans(plan_file([entry(strict, "fwd", tc[0][0], tc[0][1])]))
    with tf32_mode(False):
        run(pinned_op(args), x, w, b)
        counts = op.pin_counts(reset=True)
    fwd = [d for d in counts.directions if d.covered]
    assert fwd and fwd[0].fallback_calls == 1 and "tensor cores" in fwd[0].reason, fwd


@pytest.mark.parametrize("name", ["fp16-nhwc", "fp32-1d", "fp16-transposed-nhwc-groups"])
def test_known_misses_fall_back_counted_warned_once_and_strict(name, capfd):
    """A file with the forward only: the backward directions miss on every call (Note
    [known misses]: after the first, without an output made for a plan). Each call is
    counted, each miss warned about once per load, the results are PyTorch's, and strict
    pinning raises on a known miss as on a first one. (A warning raised in a call through
    ``torch.ops`` outside autograd's backward goes to stderr, not to Python's warnings:
    both are counted.)"""
    import warnings

    import torch

    from cudnn_explorer.pinning import op

    case = CASES[name]
    tf32 = True if case[9] is None else case[9]
    tol = TOL["tf32" if case[7] == "float32" and tf32 else case[7]]
    with tf32_mode(tf32):
        x, w, b, problem, args = tensors(case)
        plans = heuristic_plans([problem], directions=("fwd",))
    if not plans.entries:
        pytest.skip("no forward heuristic config builds for this problem")
    for load in range(2):  # a second load forgets the misses and warns again
        op.load_plans(plans)
        with tf32_mode(tf32), warnings.catch_warnings(record=True) as caught:
            want = run(aten(args), x, w, b)
            warnings.simplefilter("always")
            for _ in range(3):
                got = run(pinned_op(args), x, w, b)
                for a, ref, what in zip(got, want, ("output", "input grad", "weight grad",
                                                    "bias grad")):
                    close(a, ref, tol, f"{what} after load {load}")
        counts = op.pin_counts(reset=True)
        by = {d.description.split(" of ")[0]: d for d in counts.directions if d.key}
        assert by["fwd"].pinned_calls == 3 and by["fwd"].fallback_calls == 0, by
        for d in ("bwd-data", "bwd-filter"):
            assert by[d].pinned_calls == 0 and by[d].fallback_calls == 3, by
            assert by[d].reason == "the plan file does not cover it", by[d]
        said = [str(m.message) for m in caught] + capfd.readouterr().err.splitlines()
        said = [m for m in said if "runs PyTorch's own convolution" in m]
        assert len(said) == 2, said
    op.set_strict(True)
    try:
        with tf32_mode(tf32), pytest.raises(RuntimeError, match="strict pinning.*bwd-data"):
            run(pinned_op(args), x, w, b)
    finally:
        op.set_strict(False)
    assert op.pin_counts(reset=True).fallback_calls >= 1
    torch.cuda.synchronize()


def test_a_known_miss_allocates_no_more_than_pytorchs_own_call():
    """Every direction missing from the file: from the second call on (Note [known
    misses]) the op's fallback makes no output for a plan, so a forward and backward
    allocates on the GPU no more often than PyTorch's own call does."""
    import torch

    from cudnn_explorer.pinning import op

    x, w, b, _, args = tensors(CASES["fp16-nhwc"])
    other = tensors(CASES["fp16-nchw-1x1"])[3]
    op.load_plans(heuristic_plans([other], directions=("fwd",)))
    pinned, ref = pinned_op(args), aten(args)

    def allocations(fn):
        torch.cuda.synchronize()
        before = torch.cuda.memory_stats()["allocation.all.allocated"]
        fn(x, w, b)
        torch.cuda.synchronize()
        return torch.cuda.memory_stats()["allocation.all.allocated"] - before

    first = allocations(lambda *t: run(pinned, *t))  # first sight: outputs made, dropped
    allocations(lambda *t: run(ref, *t))
    known, own = (allocations(lambda *t: run(pinned, *t)),
                  allocations(lambda *t: run(ref, *t)))
    counts = op.pin_counts(reset=True)
    assert counts.pinned_calls == 0 and counts.fallback_calls == 6, counts.directions
    assert known <= own < first, (known, own, first)


def test_pinned_layers_under_autocast_channels_last_compile_and_cuda_graphs():
    """A small pinned CNN: under AMP and channels_last its convolutions run pinned plans
    (fp16), torch.compile gives no graph break, and a CUDA-graph-captured training step
    replays the pinned plans with the eager step's results."""
    import torch
    import torch.nn as nn

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op

    torch.manual_seed(0)

    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
                             nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False),
                             nn.ReLU(), nn.Conv2d(32, 32, 3, padding="same", groups=32),
                             nn.ConvTranspose2d(32, 8, 2, stride=2)).cuda().to(
            memory_format=torch.channels_last)

    ref_model, m = model(), model()
    x = torch.randn(8, 3, 32, 32, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="small-cnn", batch=8, input_shape=(3, 32, 32), amp="fp16",
                            channels_last=True, train=True)
    cap = capture(m, [x], spec, "cuda")
    plans = heuristic_plans([u.problem for u in cap.problems])
    report = cudnn_explorer.pin(m, plans, allow_environment=True)
    assert len(report.layers) == 4 and not report.skipped, report

    def step(net, inp):
        with torch.autocast("cuda", dtype=torch.float16, cache_enabled=False):
            out = net(inp)
        loss = out.float().square().mean()
        loss.backward()
        return loss.detach()

    want = step(ref_model, x)
    op.reset_counts()
    got = step(m, x)
    counts = op.pin_counts(reset=True)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    assert counts.pinned_calls == 11  # 4 forward, 3 input gradients + 4 weight gradients
    close(got, want, TOL["float16"] * 4, "AMP loss")
    for p, q in zip(m.parameters(), ref_model.parameters()):
        close(p.grad, q.grad, 2e-2, "AMP gradient")

    compiled = torch.compile(m, fullgraph=True)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
        out_c = compiled(x)
        out_e = m(x)
    close(out_c, out_e, 1e-3, "compiled output")
    assert op.pin_counts(reset=True).fallback_calls == 0
    del out_c, out_e, compiled

    static_x = x.clone()
    for p in m.parameters():
        p.grad = None
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):  # builds every plan before the capture
            step(m, static_x)
    torch.cuda.current_stream().wait_stream(s)
    for p in m.parameters():
        p.grad = None
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = step(m, static_x)
    assert op.pin_counts(reset=True).fallback_calls == 0
    graph.replay()
    torch.cuda.synchronize()
    close(static_loss, got, 1e-3, "CUDA-graph replay loss")
    cudnn_explorer.unpin(m)
    assert type(m[0]) is nn.Conv2d


def test_deterministic_mode_refuses_nondeterministic_plans():
    """A NONDETERMINISTIC plan (searched for among a few problems' backward configs) is
    refused while cudnn.deterministic is on: the call falls back, and says why."""
    import torch

    from cudnn_explorer.pinning import op

    found = None
    for name in ("fp16-nhwc", "fp32-tf32-nchw", "fp16-nchw-1x1", "fp32-groups"):
        x, w, b, problem, args = tensors(CASES[name])
        for direction in ("bwd-filter", "bwd-data"):
            nondet = [c for c in heuristic_configs(problem, direction, limit=20)
                      if "NONDETERMINISTIC" in c[1]]
            if nondet:
                found = (name, x, w, b, problem, args, direction, nondet[0])
                break
        if found:
            break
    if not found:
        pytest.skip("cuDNN lists no NONDETERMINISTIC backward config among the first 20 of "
                    "four problems")
    name, x, w, b, problem, args, direction, config = found
    op.load_plans(plan_file([entry(problem, direction, *config)]))
    torch.backends.cudnn.deterministic = True
    try:
        with tf32_mode(CASES[name][9]):
            got = run(pinned_op(args), x, w, b)
            counts = op.pin_counts(reset=True)
            want = run(aten(args), x, w, b)
    finally:
        torch.backends.cudnn.deterministic = False
    refused = [d for d in counts.directions if d.covered]
    assert refused and refused[0].pinned_calls == 0, refused
    assert "NONDETERMINISTIC" in refused[0].reason, refused
    index = 2 if direction == "bwd-filter" else 1
    tol = TOL["float16" if CASES[name][7] == "float16" else "tf32"]
    close(got[index], want[index], tol, f"{name} {direction}")


def test_a_pinned_resnet50_trains_as_the_unpinned_one():
    """20 SGD steps of ResNet-50 (AMP fp16, channels_last) from the same weights on the same
    batches: the pinned losses follow the unpinned ones (benchmark off) as closely as
    PyTorch's own benchmark mode, another choice of algorithms, does."""
    import torch
    torchvision = pytest.importorskip("torchvision")

    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import modules, op

    torch.manual_seed(0)
    init = torchvision.models.resnet50().state_dict()
    gen = torch.Generator(device="cuda").manual_seed(0)
    batches = [(torch.randn(16, 3, 160, 160, generator=gen, device="cuda").contiguous(
                    memory_format=torch.channels_last),
                torch.randint(0, 1000, (16,), generator=gen, device="cuda")) for _ in range(20)]

    def model():
        m = torchvision.models.resnet50().cuda().to(memory_format=torch.channels_last)
        m.load_state_dict(init)
        return m

    def train(m, benchmark=False):
        torch.backends.cudnn.benchmark = benchmark
        opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
        losses = []
        try:
            for x, y in batches:
                opt.zero_grad(set_to_none=True)
                with torch.autocast("cuda", dtype=torch.float16):
                    loss = torch.nn.functional.cross_entropy(m(x), y)
                loss.backward()
                opt.step()
                losses.append(loss.item())
        finally:
            torch.backends.cudnn.benchmark = False
        return losses

    pinned = model()
    spec = ModelSpec.create(model="resnet50", batch=16, input_shape=(3, 160, 160), amp="fp16",
                            channels_last=True, train=True)
    cap = capture(pinned, [batches[0][0]], spec, "cuda")
    plans = heuristic_plans([u.problem for u in cap.problems], limit=1)
    modules.pin(pinned, plans, allow_environment=True)
    op.reset_counts()
    got = train(pinned)
    counts = op.pin_counts(reset=True)
    base, other = train(model()), train(model(), benchmark=True)
    assert counts.pinned_calls >= 20 * 100, counts.pinned_calls
    assert counts.fallback_calls <= counts.calls // 50, counts.fallbacks
    rel = lambda a: max(abs(p - q) / abs(q) for p, q in zip(a, base))  # noqa: E731
    assert rel(got) <= max(3 * rel(other), 2e-3), (got, base, other)
    modules.unpin(pinned)


def test_a_channels_last_mobilenet_runs_every_call_pinned():
    """MobileNetV3-Large under AMP fp16 in channels_last: its squeeze-and-excitation 1x1
    maps (N x C x 1 x 1, contiguous in both layouts) are captured NHWC, as PyTorch runs
    them, so a plan file made from the capture covers every call of a training step
    (Note [ambiguous strides] in cudnn_explorer/model/tracer.py); the pinned step's loss
    is the unpinned one's."""
    import torch
    torchvision = pytest.importorskip("torchvision")

    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import modules, op

    torch.manual_seed(0)
    init = torchvision.models.mobilenet_v3_large().state_dict()

    def model():
        m = torchvision.models.mobilenet_v3_large().cuda().to(memory_format=torch.channels_last)
        m.load_state_dict(init)
        return m.eval()  # (no dropout; the batch norms' statistics fixed)

    x = torch.randn(8, 3, 224, 224, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="mobilenet_v3_large", batch=8, input_shape=(3, 224, 224),
                            amp="fp16", channels_last=True, train=True)
    cap = capture(model(), [x], spec, "cuda")
    maps = [u.problem for u in cap.problems if tuple(u.problem.input_shape[2:]) == (1, 1)]
    assert maps and all(p.layout == "nhwc" for p in maps), [(p.input_shape, p.layout)
                                                           for p in maps]
    pinned = model()
    modules.pin(pinned, heuristic_plans([u.problem for u in cap.problems], limit=1),
                allow_environment=True)

    def step(m):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = m(x).float().square().mean()
        loss.backward()
        return loss.detach()

    op.reset_counts()
    got = step(pinned)
    counts = op.pin_counts(reset=True)
    want = step(model())
    # every call is covered by the file; a plan that fails to build may fall back (counted,
    # as the ResNet-50 test allows), but not because the file lacks the call's key
    uncovered = [(d.description, d.reason) for d in counts.fallbacks if not d.covered]
    assert not uncovered, uncovered
    assert counts.calls == cap.conv_calls, (counts.calls, cap.conv_calls)
    assert counts.fallback_calls <= cap.conv_calls // 50, counts.fallbacks
    close(got, want, TOL["float16"] * 4, "AMP loss")
    modules.unpin(pinned)


def test_pinned_calls_on_several_threads_at_once_each_run_their_own_plan():
    """Four threads call pinned convolutions of four different problems at once, many
    times (Note [no allocation per pinned call]: each thread reuses its own key and
    pointer map): every call runs its own pinned plan, and every result equals PyTorch's."""
    import threading

    import torch

    from cudnn_explorer.pinning import op

    names = ["fp16-nhwc", "fp16-nchw-1x1", "fp32-groups", "fp16-depthwise-nhwc"]
    with tf32_mode(None):
        made = {n: tensors(CASES[n]) for n in names}
        op.load_plans(heuristic_plans([made[n][3] for n in names]))
        op.reset_counts()
        want = {n: run(aten(made[n][4]), *made[n][:3]) for n in names}
        got, errors = {}, []

        def work(n):
            try:
                x, w, b, _, args = made[n]
                for _ in range(20):
                    got[n] = run(pinned_op(args), x, w, b)
                torch.cuda.synchronize()
            except Exception as e:  # noqa: BLE001  (said below, with the thread's case)
                errors.append(f"{n}: {type(e).__name__}: {e}")

        threads = [threading.Thread(target=work, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join(300)
        counts = op.pin_counts(reset=True)
    assert not errors, errors
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    assert counts.pinned_calls == 4 * 20 * 3
    for n in names:
        tol = TOL["tf32" if CASES[n][7] == "float32" else CASES[n][7]]
        for what, a, ref in zip(("output", "input gradient", "weight gradient"), got[n],
                                want[n]):
            close(a, ref, tol, f"{n} on its own thread: {what}")
