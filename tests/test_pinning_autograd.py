"""The pinned op under every autograd feature, on the CPU, and loading, reloading and
removing pins safely. On the CPU the op's kernels are PyTorch's own convolution (counted
as fallbacks), but its autograd is the op's own: double backward (Note [double backward]),
forward-mode AD (Note [forward-mode AD]) and vmap run through the op's nodes and calls, so
these tests check that wiring against ATen in float64. test_gpu_pinning_autograd.py checks
the same on the GPU with every call pinned."""
import os
import subprocess
import sys
import warnings

import pytest

from conftest import requires_ext
from pinning_helpers import AUTOGRAD_CASES

pytestmark = requires_ext

torch = pytest.importorskip("torch")
nn = torch.nn


def _tensors(case, seed=0, device="cpu", dtype=torch.float64):
    xs, ws, *_, transposed, _, groups = case
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(xs, generator=gen, dtype=dtype).to(device)
    w = torch.randn(ws, generator=gen, dtype=dtype).to(device)
    out_ch = ws[1] * groups if transposed else ws[0]
    b = torch.randn(out_ch, generator=gen, dtype=dtype).to(device)
    return x, w, b


def _fns(case):
    from cudnn_explorer.pinning.op import ops

    _, _, s, p, d, t, op_, g = case
    pinned = lambda x, w, b: ops().conv(x, w, b, s, p, d, t, op_, g)  # noqa: E731
    aten = lambda x, w, b: torch.ops.aten.convolution(x, w, b, s, p, d, t, op_, g)  # noqa: E731
    return pinned, aten


def _quiet():
    """CPU calls fall back with a warning (once per reason): not what these tests test."""
    return warnings.catch_warnings(record=True)


@pytest.mark.parametrize("name", sorted(AUTOGRAD_CASES))
def test_gradgradcheck_through_the_op(name):
    """Second derivatives of the op (with bias) in float64 against finite differences,
    for every combination gradgradcheck forms (x, w and b all differentiable)."""
    pinned, _ = _fns(AUTOGRAD_CASES[name])
    inputs = tuple(t.requires_grad_() for t in _tensors(AUTOGRAD_CASES[name]))
    with _quiet():
        assert torch.autograd.gradgradcheck(pinned, inputs)


@pytest.mark.parametrize("need", ["x", "w", "xw", "xwb"])
def test_second_derivatives_equal_atens_for_each_combination(need):
    """d/d(x, w, b) of a gradient penalty on the op's first gradients equals ATen's, for
    each set of inputs that need gradients."""
    case = AUTOGRAD_CASES["grouped"]
    results = []
    for fn in _fns(case):
        x, w, b = _tensors(case)
        leaves = [t.requires_grad_() for t, k in zip((x, w, b), "xwb") if k in need]
        with _quiet():
            out = fn(x, w, b)
            first = torch.autograd.grad(out.pow(2).sum(), leaves, create_graph=True)
            penalty = sum(g.pow(2).sum() for g in first)
            results.append(torch.autograd.grad(penalty, leaves))
    for got, want in zip(*results):
        torch.testing.assert_close(got, want)


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Conv1d(3, 5, 3, padding=1)
        self.b = nn.Conv1d(5, 4, 3, padding=2, dilation=2)
        self.c = nn.ConvTranspose1d(4, 2, 4, stride=2, padding=1)

    def forward(self, x):
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def _pinned_net(seed=0):
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.pinning.modules import pin

    torch.manual_seed(seed)
    net, ref = _Net().double(), _Net().double()
    ref.load_state_dict(net.state_dict())
    pin(net, PlanFile(environment=PlanEnvironment(), entries=[], source="test"))
    return net, ref


def test_a_gradient_penalty_fills_every_parameter_gradient():
    """The defect: a gradient penalty (create_graph=True) through pinned layers left the
    weights' .grad None. Each parameter's gradient equals the unpinned model's."""
    net, ref = _pinned_net()
    x = torch.randn(2, 3, 11, dtype=torch.float64)
    for m in (net, ref):
        xi = x.clone().requires_grad_()
        with _quiet():
            out = m(xi)
            (g,) = torch.autograd.grad(out.pow(2).mean(), xi, create_graph=True)
            (g.pow(2).sum() + out.mean()).backward()
    for (name, p), q in zip(net.named_parameters(), ref.parameters()):
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, q.grad, msg=name)


@pytest.mark.parametrize("name", ["forward", "transposed", "grouped", "1-D"])
def test_forward_mode_ad_gives_atens_tangent(name):
    """torch.func.jvp, torch.autograd.forward_ad and jacfwd through the op equal ATen's."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacfwd, jvp

    case = AUTOGRAD_CASES[name]
    pinned, aten = _fns(case)
    x, w, b = _tensors(case)
    tx, tw, tb = _tensors(case, seed=1)
    with _quiet():
        got = jvp(pinned, (x, w, b), (tx, tw, tb))
        want = jvp(aten, (x, w, b), (tx, tw, tb))
        assert got[1].abs().max() > 0
        torch.testing.assert_close(got, want)
        with fwAD.dual_level():
            out = pinned(fwAD.make_dual(x, tx), w, fwAD.make_dual(b, tb))
            tangent = fwAD.unpack_dual(out).tangent
        torch.testing.assert_close(tangent, jvp(aten, (x, w, b), (tx, torch.zeros_like(w),
                                                                  tb))[1])
        xs = x[:1, :, ...].contiguous()
        torch.testing.assert_close(jacfwd(lambda t: pinned(t, w, b))(xs),
                                   jacfwd(lambda t: aten(t, w, b))(xs))


def test_forward_over_reverse_hessian_vector_product():
    """jvp of a gradient (a Hessian-vector product) through the op's backward."""
    from torch.func import grad, jvp

    case = AUTOGRAD_CASES["forward"]
    pinned, aten = _fns(case)
    x, w, b = _tensors(case)
    v = _tensors(case, seed=2)[1]
    with _quiet():
        got = [jvp(grad(lambda ww: f(x, ww, b).pow(2).sum()), (w,), (v,))[1]
               for f in (pinned, aten)]
    torch.testing.assert_close(*got)


def test_vmap_per_sample_gradients_match_the_loop():
    """vmap(grad(f)) through pinned layers: each sample's parameter gradients equal a loop
    of single-sample backward passes."""
    from torch.func import functional_call, grad, vmap

    net, _ = _pinned_net()
    params = {k: v.detach() for k, v in net.named_parameters()}
    xs = torch.randn(4, 3, 11, dtype=torch.float64)

    def loss(p, x):
        return functional_call(net, p, (x.unsqueeze(0),)).pow(2).sum()

    with _quiet():
        batched = vmap(grad(loss), in_dims=(None, 0))(params, xs)
        for i in range(xs.shape[0]):
            one = grad(loss)(params, xs[i])
            for k in params:
                torch.testing.assert_close(batched[k][i], one[k], msg=k)


def test_compiled_autograd_is_refused_with_one_clear_error():
    """Compiled autograd cannot take the op's nodes: the error names the node."""
    from torch._dynamo import compiled_autograd

    net, _ = _pinned_net()
    x = torch.randn(2, 3, 11, dtype=torch.float64)
    with _quiet(), pytest.raises(Exception, match="PinnedConvBackward"):
        with compiled_autograd._enable(torch.compile(backend="eager")):
            net(x).sum().backward()


def test_unpin_restores_a_layer_parametrized_after_pinning():
    """Pin, weight_norm, unpin: the layer keeps its parametrization, runs, equals the
    never-pinned layer, and removing the parametrization leaves a plain Conv1d."""
    from torch.nn.utils import parametrize
    from torch.nn.utils.parametrizations import weight_norm

    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.pinning.modules import pin, unpin

    torch.manual_seed(0)
    layer, ref = nn.Conv1d(3, 4, 3), nn.Conv1d(3, 4, 3)
    ref.load_state_dict(layer.state_dict())
    pin(layer, PlanFile(environment=PlanEnvironment(), entries=[], source="t"))
    for m in (layer, ref):
        weight_norm(m)
    assert unpin(layer) == 1
    assert not hasattr(type(layer), "_cudnn_explorer_base")
    assert parametrize.is_parametrized(layer, "weight")
    x = torch.randn(2, 3, 9)
    torch.testing.assert_close(layer(x), ref(x))
    parametrize.remove_parametrizations(layer, "weight")
    assert type(layer) is nn.Conv1d
    assert unpin(layer) == 0


def _plans(n_entries=1, deterministic_twin=False):
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.model.tracer import problem_of
    from pinning_helpers import entry

    problem = problem_of(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), [1, 1], [0, 0],
                         [1, 1], 1, True)
    entries = [entry(problem, "fwd", "ConvFwd_eng0"),
               entry(problem, "bwd-filter", "ConvBwdFilter_eng1_k2=3")][:n_entries]
    if deterministic_twin:
        entries.append(entry(problem, "fwd", "ConvFwd_eng1", deterministic=True))
    return PlanFile(environment=PlanEnvironment(), entries=entries, source="twin.json")


def test_a_failed_load_changes_nothing():
    """Two entries the op keys alike (they differ only in 'deterministic') are refused
    with one line naming them, and the plans loaded before stay loaded, counts and all."""
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.pinning import op

    assert op.load_plans(_plans(2)) == 2
    before = op.native.load().loaded_plan_count()
    with pytest.raises(UserError) as e:
        op.load_plans(_plans(1, deterministic_twin=True))
    msg = str(e.value)
    assert "\n" not in msg and "entries 0 and 1" in msg and "'deterministic'" in msg, msg
    assert op.native.load().loaded_plan_count() == before == 2
    assert len([s for s in op.native.load().pin_stats() if s.covered]) == 2
    # the native table itself is atomic too: a bad key after good ones changes nothing
    C = op.native.load()
    good, bad = C.PlanSpec(), C.PlanSpec()
    good.key, bad.key = [1] * 20, [99, 1, 2]
    with pytest.raises(Exception, match="not a version-1 key"):
        C.load_plans([good, bad])
    assert C.loaded_plan_count() == 2


def test_a_forward_fallback_reaches_pythons_warnings():
    """A forward call that falls back warns through Python's warnings module (pytest.warns
    and simplefilter('error') see it), as a backward's does."""
    from cudnn_explorer.pinning import functional, op

    op.load_plans(_plans(2))  # clears the once-per-reason memory
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)
    with pytest.warns(UserWarning, match="runs PyTorch's own convolution"):
        functional.call(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    op.load_plans(_plans(2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning):
            functional.call(x, w, None, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)


def test_strict_pinning_names_the_layer_and_key():
    """pin(strict=True): a call the file does not cover raises, naming the layer, the
    direction and the key, before it runs; a call that the op itself would refuse (here:
    CPU tensors) raises too, naming the layer and why."""
    from cudnn_explorer.pinning import functional, op
    from cudnn_explorer.pinning.modules import pin

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1))
    try:
        pin(model, _plans(2), strict=True)
        with pytest.raises(functional.StrictPinError) as e:
            model[2](torch.randn(2, 4, 6, 6))
        msg = str(e.value)
        assert "\n" not in msg and "layer '2' (PinnedConv2d)" in msg and \
            "its output, fwd of 2-D convolution" in msg and "(key [1, 0, " in msg, msg
        # layer 0's directions are covered (its input needs no gradient): the op runs it,
        # and refuses it, strictly, for its tensors on the CPU
        with pytest.raises(functional.StrictPinError) as e:
            model[0](torch.randn(2, 3, 8, 8))
        msg = str(e.value)
        assert "\n" not in msg and "layer '0' (PinnedConv2d)" in msg and \
            "not on a CUDA device" in msg, msg
        assert op.strict()
    finally:
        op.clear_plans()
    assert not op.strict()


def test_a_strict_check_is_made_once_per_call_shape_and_again_for_other_plans(monkeypatch):
    """Note [strict checks, once per call shape]: a covered call shape is checked once;
    a call that wants another direction (the weight's gradient), another shape, or the
    same shape after other plans are loaded is checked again, and raises where not
    covered."""
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.pinning import functional, op

    checks = []
    conv = getattr(torch.backends.cudnn, "conv", None)
    precision = getattr(conv, "fp32_precision", None)
    real = op.uncovered
    monkeypatch.setattr(op, "uncovered", lambda *a: checks.append(a[-1]) or real(*a))
    x, w = torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3)

    def check(x, w):
        functional._check_strict(x, w, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    try:
        op.load_plans(_plans(1), strict=True)  # the output only
        for _ in range(3):
            check(x, w)
        assert checks == [["output"]]
        with pytest.raises(functional.StrictPinError, match="its weight gradient"):
            check(x, w.requires_grad_())
        with pytest.raises(functional.StrictPinError, match="its weight gradient"):
            check(x, w)  # not remembered: raises again
        check(x, w.detach())
        assert len(checks) == 3  # the covered shape, remembered
        with pytest.raises(functional.StrictPinError, match="its output"):
            check(torch.randn(2, 3, 9, 9), w.detach())  # another size
        op.load_plans(_plans(2), strict=True)  # the weight gradient too
        check(x, w.detach())
        check(x, w)
        assert len(checks) == 6
        # what the keys are computed from, each changed alone: checked again, and raises
        for other in (x.contiguous(memory_format=torch.channels_last), x.double()):
            with pytest.raises(functional.StrictPinError, match="its output"):
                check(other, w.detach().to(other.dtype))
        if precision is not None:  # the new API alone: no TF32 (a torch that has it)
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            with pytest.raises(functional.StrictPinError, match="its output"):
                check(x, w.detach())
            torch.backends.cudnn.conv.fp32_precision = "tf32"
            check(x, w.detach())  # remembered again
            assert len(checks) == 9
        op.load_plans(PlanFile(environment=PlanEnvironment(), entries=[]), strict=True)
        with pytest.raises(functional.StrictPinError, match="its output"):
            check(x, w.detach())  # covered before, not by these plans
    finally:
        if precision is not None:
            torch.backends.cudnn.conv.fp32_precision = precision
        op.clear_plans()


_RANK0_ONLY = r"""
import os, sys, torch, torch.distributed as dist
rank, init, plans = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
from cudnn_explorer.pinning.modules import pin
if rank == 0:
    report = pin(torch.nn.Conv2d(3, 4, 3), plans)
    print("pinned", report.plans, flush=True)
dist.barrier()
dist.destroy_process_group()
print("done", rank, flush=True)
"""


def test_rank_0_alone_can_pin_without_a_group(tmp_path):
    """Under torch.distributed, ``if rank == 0: pin(model, f)`` does not wait for the
    other ranks (pinning is collective only with a group)."""
    path = tmp_path / "p.json"
    path.write_text(_plans(2).to_json())
    script = tmp_path / "rank.py"
    script.write_text(_RANK0_ONLY)
    procs = [subprocess.Popen([sys.executable, str(script), str(r), str(tmp_path / "init"),
                               str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
             for r in (0, 1)]
    outs = []
    try:
        for p in procs:
            outs.append(p.communicate(timeout=90))
    finally:
        for p in procs:
            p.kill()
    assert [p.returncode for p in procs] == [0, 0], outs
    assert "pinned 2" in outs[0][0] and "done 0" in outs[0][0] and "done 1" in outs[1][0]


_LOAD_WITHOUT_EXTENSION = r"""
import sys, warnings
sys.modules["cudnn_explorer._C"] = None  # as on a machine where it is not built
import torch
model = torch.load(sys.argv[1], weights_only=False)
x = torch.load(sys.argv[2])
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    out = model(x)
torch.save(out, sys.argv[3])
print(type(model[0]).__name__, len(w), str(w[0].message).split(":")[1] if w else "")
"""


def test_a_saved_pinned_model_loads_and_runs_without_the_extension(tmp_path):
    from cudnn_explorer.pinning.modules import pin

    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.ConvTranspose2d(4, 2, 2, 2))
    x = torch.randn(2, 3, 8, 8)
    want = model(x)
    pin(model, _plans(2))
    torch.save(model, tmp_path / "m.pt")
    torch.save(x, tmp_path / "x.pt")
    script = tmp_path / "load.py"
    script.write_text(_LOAD_WITHOUT_EXTENSION)
    r = subprocess.run([sys.executable, str(script), str(tmp_path / "m.pt"),
                        str(tmp_path / "x.pt"), str(tmp_path / "out.pt")],
                       capture_output=True, text=True, timeout=120,
                       cwd=os.path.dirname(os.path.dirname(__file__)))
    assert r.returncode == 0, r.stderr[-2000:]
    name, n_warnings, *_ = r.stdout.split()
    assert name.startswith("Pinned__torch_dot_nn") and int(n_warnings) == 1, r.stdout
    assert "pinned convolutions run PyTorch's own convolution" in r.stdout or \
        "run PyTorch's own convolution" in r.stdout, r.stdout
    torch.testing.assert_close(torch.load(tmp_path / "out.pt"), want)


def test_a_gradient_to_the_input_alone_computes_no_weight_gradient():
    """torch.autograd.grad(out, x) asks each pinned backward for the input's gradient
    only, as ATen's convolution backward is asked (its weights' were computed too)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    masks = []

    class Log(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if "convolution_backward" in str(func) or "conv_backward" in str(func):
                masks.append((str(func).split(".")[0], list(args[-1])))
            return func(*args, **(kwargs or {}))

    for pinned in (True, False):
        torch.manual_seed(0)
        net = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.SiLU(), nn.Conv2d(4, 4, 3))
        if pinned:
            from cudnn_explorer.pinning.modules import pin

            pin(net, _plans(2))
        x = torch.randn(2, 3, 8, 8, requires_grad=True)
        with _quiet(), Log():
            torch.autograd.grad(net(x).sum(), x)
    assert masks == [("cudnn_explorer", [True, False, False])] * 2 + \
        [("aten", [True, False, False])] * 2, masks


def test_the_eager_call_releases_the_gil():
    """While one thread is inside a pinned call (here a CPU convolution of a tenth of a
    second or more, PyTorch's own), another Python thread keeps running: the eager entry
    releases the GIL, as ATen's bindings do (a plan build can take seconds). Held, the
    other thread would run for one switch interval (5 ms) at most."""
    import threading
    import time

    from cudnn_explorer.pinning import functional

    x, w = torch.randn(8, 64, 96, 96), torch.randn(64, 64, 5, 5)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ticks, go, done = [0], threading.Event(), threading.Event()

    def count():
        go.wait()
        while not done.is_set():
            ticks[0] += 1

    t = threading.Thread(target=count)
    t.start()
    try:
        with _quiet():
            functional.call(x[:1], w, None, [1, 1], [2, 2], [1, 1], False, [0, 0], 1)  # warm
            go.set()
            time.sleep(0.05)  # the counter alone (sleep releases the GIL): its rate
            rate = ticks[0] / 0.05
            start, t0 = ticks[0], time.perf_counter()
            functional.call(x, w, None, [1, 1], [2, 2], [1, 1], False, [0, 0], 1)
            took, during = time.perf_counter() - t0, ticks[0] - start
    finally:
        done.set()
        t.join()
        torch.set_num_threads(threads)
    assert took > 0.05, took  # long enough to tell one switch interval from the call
    assert during > 0.25 * rate * took, (during, rate, took)
