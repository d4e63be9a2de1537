"""The pinned op under every autograd feature on the GPU, with plans that cover the
directions it runs, so that the pinned path is what is checked: each test asserts from
the op's own counts that its calls ran pinned plans (and none fell back), and checks
against ATen. Each prints one line, "autograd check: ...", with the measured error and
the counts (pytest -s shows them)."""
import pytest

from conftest import requires_cuda
from pinning_helpers import AUTOGRAD_CASES, heuristic_plans

pytestmark = requires_cuda

# the convolutions of the GPU checks (float64), a subset of the CPU tests
CASES = {k: AUTOGRAD_CASES[k] for k in ("forward", "transposed", "grouped", "dilated", "1-D",
                                        "3-D")}


def _report(name, err, counts):
    print(f"\nautograd check: {name}: largest error / largest value {err:.2e}; "
          f"pinned calls {counts.pinned_calls}, fallback calls {counts.fallback_calls}")


def _rel(got, want):
    return ((got.double() - want.double()).abs().max() /
            want.double().abs().max().clamp_min(1e-30)).item()


def _case(name, seed=0, one_sample=False):
    """(x, w, b, the op on them, ATen on them, the plans that cover the call; with
    ``one_sample``, the call on x[:1] too)."""
    import torch

    from cudnn_explorer.model.tracer import problem_of
    from cudnn_explorer.pinning.op import ops

    xs, ws, s, p, d, t, op_, g = CASES[name]
    gen = torch.Generator(device="cuda").manual_seed(seed)
    x, w = (torch.randn(sh, generator=gen, device="cuda", dtype=torch.float64)
            for sh in (xs, ws))
    b = torch.randn(ws[1] * g if t else ws[0], generator=gen, device="cuda",
                    dtype=torch.float64)
    n = len(xs) - 2
    full = (lambda v: list(v) * n if len(v) == 1 else list(v))
    problems = [problem_of(x, w, full(s), full(p), full(d), g, True, t, full(op_))]
    if one_sample:
        problems.append(problem_of(x[:1], w, full(s), full(p), full(d), g, True, t, full(op_)))
    plans = heuristic_plans(problems)
    assert len(plans.entries) == 3 * len(problems), [e.tag for e in plans.entries]
    pinned = lambda x, w, b: ops().conv(x, w, b, s, p, d, t, op_, g)  # noqa: E731
    aten = lambda x, w, b: torch.ops.aten.convolution(x, w, b, s, p, d, t, op_, g)  # noqa: E731
    return x, w, b, pinned, aten, plans


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradgradcheck_float64_runs_pinned(name):
    """gradgradcheck through pinned plans, and a gradient penalty's second derivatives
    (x, w, b) against ATen's, every call pinned."""
    import torch

    from cudnn_explorer.pinning import op

    x, w, b, pinned, aten, plans = _case(name)
    op.load_plans(plans)
    inputs = tuple(t.detach().clone().requires_grad_() for t in (x, w, b))
    assert torch.autograd.gradgradcheck(pinned, inputs)
    assert op.pin_counts(reset=True).fallback_calls == 0
    got = []
    for fn in (pinned, aten):
        leaves = [t.detach().clone().requires_grad_() for t in (x, w, b)]
        out = fn(*leaves)
        first = torch.autograd.grad(out.pow(2).sum(), leaves, create_graph=True)
        got.append(torch.autograd.grad(sum(g.pow(2).sum() for g in first), leaves))
        if fn is pinned:
            counts = op.pin_counts(reset=True)
    err = max(_rel(a, e) for a, e in zip(*got))
    _report(f"double backward, float64 {name}", err, counts)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    # 1 fwd; bwd-data and bwd-filter; the double backward's 2 fwd, bwd-data and
    # bwd-filter; then the backward of gO = 2 out: bwd-data and bwd-filter
    assert counts.pinned_calls == 9
    assert err < 1e-10


def _small_net(seed=0):
    import torch
    import torch.nn as nn

    torch.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.SiLU(),
                         nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.SiLU(),
                         nn.ConvTranspose2d(16, 8, 2, stride=2), nn.SiLU(),
                         nn.Conv2d(8, 4, 3, dilation=2)).cuda().to(
        memory_format=torch.channels_last)


def test_gradient_penalty_under_amp_bf16_channels_last_runs_pinned():
    """An R1-style penalty (the squared input gradient, create_graph=True) plus the loss,
    under AMP bfloat16 and channels_last: every parameter's gradient equals the unpinned
    model's within bfloat16's tolerance, every call pinned."""
    import torch

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op

    ref, net = _small_net(), _small_net()
    x = torch.randn(4, 3, 16, 16, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="penalty-net", batch=4, input_shape=(3, 16, 16), amp="bf16",
                            channels_last=True, train=True)
    cap = capture(net, [x.clone().requires_grad_()], spec, "cuda")
    cudnn_explorer.pin(net, heuristic_plans([u.problem for u in cap.problems]),
                       allow_environment=True)

    def step(m):
        xi = x.clone().requires_grad_()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = m(xi)
        (g,) = torch.autograd.grad(out.float().pow(2).mean(), xi, create_graph=True)
        (g.pow(2).sum() * 10 + out.float().mean()).backward()
        return [p.grad.clone() for p in m.parameters()]

    want = step(ref)
    op.reset_counts()
    got = step(net)
    counts = op.pin_counts(reset=True)
    err = max(_rel(a, e) for a, e in zip(got, want))
    _report("gradient penalty, AMP bfloat16 channels_last, 4 layers", err, counts)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    # 4 fwd; 4 bwd-data (the input gradient); the penalty's backward: 4 fwd and 4
    # bwd-filter (double backward), then 4 bwd-data and 4 bwd-filter
    assert counts.pinned_calls == 24
    assert all(g.abs().max() > 0 for g in got)
    assert err < 5e-2


@pytest.mark.parametrize("name", ["forward", "transposed"])
def test_jvp_and_jacfwd_run_pinned(name):
    import torch
    from torch.func import jacfwd, jvp

    from cudnn_explorer.pinning import op

    x, w, b, pinned, aten, plans = _case(name, one_sample=True)  # jacfwd on x[:1]
    tx, tw, tb = (torch.randn_like(t) for t in (x, w, b))
    op.load_plans(plans)
    got = jvp(pinned, (x, w, b), (tx, tw, tb))[1]
    jac = jacfwd(lambda t: pinned(t, w, b))(x[:1])
    counts = op.pin_counts(reset=True)
    want = jvp(aten, (x, w, b), (tx, tw, tb))[1]
    jac_want = jacfwd(lambda t: aten(t, w, b))(x[:1])
    err = max(_rel(got, want), _rel(jac, jac_want))
    _report(f"jvp and jacfwd, float64 {name}", err, counts)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    assert counts.pinned_calls > x[:1].numel()  # one per basis vector at least
    assert err < 1e-10


def test_vmap_per_sample_gradients_run_pinned():
    """vmap(grad) per-sample gradients of a pinned float32 model (TF32 off) equal a loop
    of single-sample gradients of the unpinned one; every per-sample call is pinned."""
    import torch
    import torch.nn as nn
    from torch.func import functional_call, grad, vmap

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op

    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(0)
        ref = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Tanh(), nn.Conv2d(8, 4, 3, stride=2)).cuda()
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Tanh(), nn.Conv2d(8, 4, 3, stride=2)).cuda()
        net.load_state_dict(ref.state_dict())
        xs = torch.randn(6, 3, 12, 12, device="cuda")
        spec = ModelSpec.create(model="per-sample", batch=1, input_shape=(3, 12, 12),
                                train=True)
        cap = capture(net, [xs[:1]], spec, "cuda")
        plans = heuristic_plans([u.problem for u in cap.problems],
                                accept=lambda notes: "TENSOR_CORE" not in notes)
        cudnn_explorer.pin(net, plans, allow_environment=True)
        params = {k: v.detach() for k, v in net.named_parameters()}

        def loss(m, p, x):
            return functional_call(m, p, (x.unsqueeze(0),)).pow(2).sum()

        op.reset_counts()
        batched = vmap(grad(lambda p, x: loss(net, p, x)), in_dims=(None, 0))(params, xs)
        counts = op.pin_counts(reset=True)
        err = 0.0
        for i in range(xs.shape[0]):
            one = grad(lambda p, x: loss(ref, p, x))(params, xs[i])
            err = max(err, *(_rel(batched[k][i], one[k]) for k in params))
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    _report("vmap per-sample gradients, float32 (TF32 off), 6 samples", err, counts)
    assert counts.fallback_calls == 0, [(d.description, d.reason) for d in counts.fallbacks]
    assert counts.pinned_calls == 6 * 5  # per sample: 2 fwd, 1 bwd-data, 2 bwd-filter
    assert err < 1e-4


def test_expanded_weight_per_sample_gradients_under_routing_run_the_op():
    """Note [per-sample gradients under routing]: call_for_per_sample_grads of a model whose
    F.conv2d is routed (as under the start-up hook) gives the unrouted model's per-sample
    gradients (float32, TF32 off), its forward calls running pinned plans."""
    import torch
    import torch.nn as nn
    from torch.nn.utils._per_sample_grad import call_for_per_sample_grads

    from cudnn_explorer.model.tracer import problem_of
    from cudnn_explorer.pinning import functional, op

    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.Tanh(), nn.Conv2d(8, 4, 3, stride=2)).cuda()
        x = torch.randn(6, 3, 12, 12, device="cuda")
        call_for_per_sample_grads(net)(x).pow(2).sum().backward()
        want = [p.grad_sample.clone() for p in net.parameters()]
        for p in net.parameters():
            del p.grad_sample
        h = torch.randn(6, 8, 10, 10, device="cuda")
        problems = [problem_of(x, net[0].weight, [1, 1], [0, 0], [1, 1], 1, False),
                    problem_of(h, net[2].weight, [2, 2], [0, 0], [1, 1], 1, False)]
        op.load_plans(heuristic_plans(problems, directions=("fwd",),
                                      accept=lambda notes: "TENSOR_CORE" not in notes))
        with functional.process_routing():
            op.reset_counts()
            call_for_per_sample_grads(net)(x).pow(2).sum().backward()
            counts = op.pin_counts(reset=True)
        err = max(_rel(p.grad_sample, w) for p, w in zip(net.parameters(), want))
    finally:
        torch.backends.cudnn.allow_tf32 = saved
        op.clear_plans()
    _report("ExpandedWeight per-sample gradients under routing, float32 (TF32 off)", err,
            counts)
    pinned = {d.description for d in counts.directions if d.pinned_calls}
    assert len(pinned) == 2 and all(d.startswith("fwd") for d in pinned), counts
    assert err < 1e-4


def test_a_captured_graph_replays_after_other_plans_are_loaded():
    """Capture a pinned forward in a CUDA graph, load another plan file (other engine
    configs) and run it eagerly, then replay: the replay gives the captured result
    (Note [captured plans]: the plans the graph replays are kept)."""
    import torch

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op

    net = _small_net()
    x = torch.randn(4, 3, 16, 16, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="graph-net", batch=4, input_shape=(3, 16, 16), amp="fp16",
                            channels_last=True, train=False)
    with torch.no_grad():
        cap = capture(net, [x], spec, "cuda")
    problems = [u.problem for u in cap.problems]
    first, second = heuristic_plans(problems, rank=0), heuristic_plans(problems, rank=1)
    assert [e.tag for e in first.entries] != [e.tag for e in second.entries]
    cudnn_explorer.pin(net, first, allow_environment=True)
    retired = op.native.load().retired_plan_count()
    static_x = x.clone()

    def forward():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16):
            return net(static_x)

    with torch.cuda.stream(torch.cuda.Stream()):
        forward()  # builds the plans before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = forward()
    graph.replay()
    torch.cuda.synchronize()
    before = static_out.clone()
    op.load_plans(second)
    op.reset_counts()
    eager = forward()
    counts = op.pin_counts(reset=True)
    torch.cuda.empty_cache()
    static_x.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    err = _rel(static_out, before)
    _report("CUDA graph replayed after another plan file was loaded", err, counts)
    assert counts.fallback_calls == 0 and counts.pinned_calls == 4
    # the 4 captured plans were kept, not destroyed, when the second file was loaded
    assert op.native.load().retired_plan_count() == retired + 4
    assert torch.equal(static_out, before)
    assert _rel(eager, before) < 2e-2


def test_prebuild_builds_every_plan_before_the_first_step():
    """prebuild on a pinned AMP model: no fallbacks, the model's state untouched (no
    .grad, the same batch-norm statistics), and the first real step builds nothing."""
    import torch
    import torch.nn as nn

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                        nn.Conv2d(16, 8, 3, stride=2)).cuda().to(
        memory_format=torch.channels_last)
    x = torch.randn(8, 3, 20, 20, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="prebuild-net", batch=8, input_shape=(3, 20, 20),
                            amp="fp16", channels_last=True, train=True)
    cap = capture(net, [x], spec, "cuda")
    state = {k: v.clone() for k, v in net.state_dict().items()}
    # built on first call (ahead=False): prebuild's own builds are what this checks; a pin
    # that builds ahead builds every plan of the file, the first layer's bwd-data too
    cudnn_explorer.pin(net, heuristic_plans([u.problem for u in cap.problems]),
                       allow_environment=True, ahead=False)
    with torch.autocast("cuda", dtype=torch.float16):
        record = cudnn_explorer.prebuild(net, [x])
    assert record.fallback_calls == 0, [(d.description, d.reason) for d in record.fallbacks]
    built = sum(d.builds for d in record.directions)
    assert built == 5  # 2 fwd, 1 bwd-data, 2 bwd-filter: each plan once
    assert all(p.grad is None for p in net.parameters())
    for k, v in net.state_dict().items():
        assert torch.equal(v, state[k]), k
    with torch.autocast("cuda", dtype=torch.float16):
        net(x).float().mean().backward()
    after = op.pin_counts(reset=True)
    assert after.fallback_calls == 0 and after.pinned_calls == 5
    assert sum(d.builds for d in after.directions) == built  # nothing built in the step
    _report("prebuild then the first step (5 plans built by prebuild, 0 by the step)", 0.0,
            after)


def test_strict_pinning_under_amp_runs_covered_layers_and_names_an_uncovered_one():
    """strict=True under AMP: the covered layers run pinned (the check keys the call in
    the autocast dtype, as the op runs it); a layer added after the sweep raises,
    naming it; prebuild reports it instead of raising."""
    import torch
    import torch.nn as nn

    import cudnn_explorer
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import functional, op

    net = _small_net()
    x = torch.randn(4, 3, 16, 16, device="cuda").contiguous(memory_format=torch.channels_last)
    spec = ModelSpec.create(model="strict-net", batch=4, input_shape=(3, 16, 16), amp="fp16",
                            channels_last=True, train=True)
    cap = capture(net, [x], spec, "cuda")
    plans = heuristic_plans([u.problem for u in cap.problems])
    try:
        cudnn_explorer.pin(net, plans, allow_environment=True, strict=True)
        with torch.autocast("cuda", dtype=torch.float16):
            net(x).float().mean().backward()
        counts = op.pin_counts(reset=True)
        assert counts.fallback_calls == 0 and counts.pinned_calls == 4 + 3 + 4
        bigger = nn.Sequential(*net, nn.Conv2d(4, 4, 1)).cuda().to(
            memory_format=torch.channels_last)
        cudnn_explorer.pin(bigger, plans, allow_environment=True, strict=True)
        with torch.autocast("cuda", dtype=torch.float16):
            with pytest.raises(functional.StrictPinError, match=r"layer '7' \(PinnedConv2d\)"):
                bigger(x)
            record = cudnn_explorer.prebuild(bigger, [x])
        assert op.strict()
        assert sorted(d.description.split(" of ")[0] for d in record.fallbacks) == \
            ["bwd-data", "bwd-filter", "fwd"], record.fallbacks
    finally:
        op.clear_plans()
    _report("strict pinning under AMP (11 calls pinned, then an uncovered layer named)",
            0.0, counts)
