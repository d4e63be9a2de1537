"""Pinning on the CPU: the op's keys agree with the plan file's, and pinned layers, the
functional context, autograd, opcheck and torch.compile work through the op, whose CPU
kernel is PyTorch's own call (counted as a fallback). The GPU numerics are in
test_gpu_pinning.py."""
import pytest

from conftest import requires_ext

pytestmark = requires_ext

torch = pytest.importorskip("torch")
nn = torch.nn


def _problem(x, w, stride, padding, dilation, groups, transposed=False, out_pad=(0,),
             tf32=True):
    from cudnn_explorer.model.tracer import problem_of

    n = x.dim() - 2
    full = (lambda v: list(v) * n if len(v) == 1 else list(v))
    return problem_of(x, w, full(stride), full(padding), full(dilation), groups, tf32,
                      transposed, full(out_pad))


def _channels_last(t):
    """``t`` with channels_last strides (C innermost), which .contiguous(memory_format=)
    does not give a tensor already contiguous in both formats (C = 1, H = W = 1)."""
    order = [0] + list(range(2, t.dim())) + [1]
    dense = torch.empty([t.shape[d] for d in order], dtype=t.dtype).copy_(t.permute(*order))
    return dense.permute(0, t.dim() - 1, *range(1, t.dim() - 1))


KEY_CASES = [
    # input, weight, stride, padding, dilation, transposed, output_padding, groups, dtype, fmt
    ((2, 4, 9, 9), (6, 2, 3, 3), [2, 1], [1], [1], False, [0], 2, "float16", "cl"),
    ((2, 4, 9), (6, 4, 3), [1], [1], [2], False, [0], 1, "float32", None),
    ((2, 4, 5, 9, 9), (4, 1, 3, 3, 3), [1], [1], [1], False, [0], 4, "bfloat16", "cl"),
    ((2, 4, 9, 9), (4, 3, 3, 3), [2], [1], [1], True, [1], 2, "float16", "cl"),
    ((2, 4, 9, 9), (4, 3, 3, 3), [2], [1], [1], True, [1], 2, "float64", "cl"),
    ((3, 8, 7, 7), (8, 1, 5, 5), [1], [2], [1], False, [0], 8, "float32", None),
    ((1, 3, 16), (3, 5, 4), [2], [0], [1], True, [1], 1, "float32", None),
    # Note [ambiguous strides]: contiguous in both formats; "clw": the weight too
    ((16, 120, 1, 1), (32, 120, 1, 1), [1], [0], [1], False, [0], 1, "float16", "clw"),
    ((16, 120, 1, 1), (32, 120, 1, 1), [1], [0], [1], False, [0], 1, "float16", "cl"),
    ((2, 1, 9, 9), (4, 1, 3, 3), [1], [1], [1], False, [0], 1, "float32", "clw"),
    ((2, 8, 1, 1), (8, 1, 1, 1), [1], [0], [1], False, [0], 8, "float16", "clw"),
    ((2, 4, 1, 1, 1), (6, 4, 1, 1, 1), [1], [0], [1], False, [0], 1, "bfloat16", "clw"),
    ((2, 4, 1, 1), (4, 3, 1, 1), [1], [0], [1], True, [0], 1, "float16", "clw"),
    # "seq": a transposed sequence given an axis of size 1 (N x C x L x 1, strides L*C, 1,
    # C, 1): c10 calls it contiguous, an older Python copy of its rule channels_last
    ((2, 3, 7, 1), (4, 3, 3, 1), [1], [1, 0], [1], False, [0], 1, "float16", "seq"),
    ((16, 120, 5, 1), (32, 120, 1, 1), [1], [0], [1], False, [0], 1, "float32", "seq"),
]


def _keys_of(case, tf32):
    """(the op's keys of the call ``case`` of KEY_CASES, one per cuDNN direction, with
    TF32 ``tf32``; the call's problem)."""
    from cudnn_explorer.pinning import op

    xs, ws, s, p, d, tr, opad, g, dt, fmt = case
    x, w = torch.randn(xs, dtype=getattr(torch, dt)), torch.randn(ws, dtype=getattr(torch, dt))
    if fmt == "seq":
        x = x[..., 0].transpose(1, 2).contiguous().transpose(1, 2).unsqueeze(-1)
        assert x.stride() == (xs[1] * xs[2], 1, xs[1], 1), x.stride()
    elif fmt:  # channels_last strides, also where the shape is contiguous in both formats
        x = _channels_last(x)
        if fmt == "clw":
            w = _channels_last(w)
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        keys = op.conv_keys(x, w, s, p, d, tr, opad, g)
    finally:
        torch.backends.cudnn.allow_tf32 = saved
    return keys, _problem(x, w, s, p, d, g, tr, opad, tf32)


@pytest.mark.parametrize("tf32", [True, False])
@pytest.mark.parametrize("case", KEY_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_the_ops_keys_are_the_plan_files_keys(case, tf32):
    """Note [plan keys]: the key the op computes from a call is the one native_key writes
    for the plan file entry of the call's problem, for each cuDNN direction."""
    from cudnn_explorer.core.plans import PlanEntry, PlanKey, native_key

    keys, problem = _keys_of(case, tf32)
    for key, direction in zip(keys, ("fwd", "bwd-data", "bwd-filter")):
        e = PlanEntry(key=PlanKey.of(problem, direction, False), problem=problem,
                      tag="ConvFwd_eng0", engine=0)
        assert native_key(e) == key, direction



@pytest.mark.parametrize("case", KEY_CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_a_key_reads_as_its_problem(case):
    """A convolution the plan file does not name is described from its key alone (the
    op's fallback warning and its pin counts): in the words ConvProblem.describe gives
    the file's own, so that the two read alike. A 1-D or transposed call reads as cuDNN
    runs it (Note [plan keys]): a 2-D convolution, the transposed one as its adjoint."""
    from cudnn_explorer.measure import native

    xs, ws, s, p, d, tr, opad, g, dt, fmt = case
    for tf32 in (True, False):
        keys, problem = _keys_of(case, tf32)
        for key, direction in zip(keys, ("fwd", "bwd-data", "bwd-filter")):
            said = native.load().describe_plan_key(key)
            if len(xs) >= 4 and not tr:
                assert said == f"{direction} of {problem.describe()}"
            else:
                assert said.startswith(f"{direction} of 2-D convolution: input ")
                assert f", groups {g}" in said and dt in said
    assert native.load().describe_plan_key([1, 0, 0]) == "a convolution"
    assert native.load().describe_plan_key(keys[0][:-1]) == "a convolution"


def _net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding="same"), nn.ReLU(),
        nn.Conv2d(8, 8, 4, padding="same", padding_mode="reflect"),
        nn.Conv2d(8, 8, 3, padding=1, padding_mode="circular", groups=2),
        nn.Conv2d(8, 8, 3, padding="valid", padding_mode="replicate", bias=False),
        nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1),
    )


def _empty_plans():
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile

    return PlanFile(environment=PlanEnvironment(), source="test")


def test_pinned_layers_compute_what_the_layers_compute_and_unpin_restores_them():
    import cudnn_explorer
    from cudnn_explorer.pinning import op

    ref, m = _net(), _net()
    x = torch.randn(2, 3, 11, 10)
    want = ref(x)
    want.square().sum().backward()
    report = cudnn_explorer.pin(m, _empty_plans())
    assert report.layers == ["0", "2", "3", "4", "5"] and report.skipped == []
    assert report.plans == 0 and report.environment_differences[0].startswith("not checked")
    assert isinstance(m[0], nn.Conv2d) and repr(m[0]).startswith("PinnedConv2d(3, 8")
    assert m.state_dict().keys() == ref.state_dict().keys()
    op.reset_counts()
    got = m(x)
    got.square().sum().backward()
    torch.testing.assert_close(got, want)
    for p, q in zip(m.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    counts = op.pin_counts(reset=True)
    # 5 forwards; 4 input gradients (not the first layer's) and 5 weight gradients
    assert counts.pinned_calls == 0 and counts.fallback_calls == 14
    assert {d.reason for d in counts.directions} == {"its tensors are not on a CUDA device"}
    assert cudnn_explorer.unpin(m) == 5
    assert [type(l) for l in m] == [type(l) for l in ref]
    op.clear_plans()


def test_a_pinned_model_pickles_and_copies_pinned(tmp_path):
    """torch.save of a whole pinned model loads pinned, in a process that never pinned
    (Note [pinned classes by name]); deepcopy stays pinned too."""
    import copy
    import subprocess
    import sys

    import cudnn_explorer

    m = _net()
    cudnn_explorer.pin(m, _empty_plans())
    assert type(copy.deepcopy(m)[0]) is type(m[0])
    torch.save(m, tmp_path / "m.pt")
    code = ("import torch; m = torch.load(r'%s', weights_only=False); "
            "print(type(m[0]).__module__, m[0]._get_name(), m[5]._get_name())"
            % (tmp_path / "m.pt"))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["cudnn_explorer.pinning.modules", "PinnedConv2d",
                                  "PinnedConvTranspose2d"]
    cudnn_explorer.unpin(m)


def test_one_dimensional_three_dimensional_unbatched_and_output_size_calls():
    import cudnn_explorer
    from cudnn_explorer.pinning import op

    torch.manual_seed(0)
    layers = [nn.Conv1d(4, 6, 3, stride=2, dilation=2), nn.Conv3d(2, 4, 3, padding="same"),
              nn.ConvTranspose1d(4, 2, 4, stride=3), nn.ConvTranspose3d(2, 2, 3, stride=2)]
    inputs = [torch.randn(2, 4, 30), torch.randn(1, 2, 5, 6, 7), torch.randn(4, 9),
              torch.randn(2, 2, 3, 4, 5)]
    wants = [l(x) for l, x in zip(layers, inputs)]
    want_size = layers[3](inputs[3], output_size=[8, 10, 12])
    holder = nn.ModuleList(layers)
    assert len(cudnn_explorer.pin(holder, _empty_plans()).layers) == 4
    for l, x, want in zip(layers, inputs, wants):
        torch.testing.assert_close(l(x), want)
    torch.testing.assert_close(layers[3](inputs[3], output_size=[8, 10, 12]), want_size)
    assert op.pin_counts(reset=True).fallback_calls == 5
    cudnn_explorer.unpin(holder)


def test_the_functional_context_routes_functional_calls_and_layers():
    import torch.nn.functional as F

    import cudnn_explorer
    from cudnn_explorer.pinning import op

    x, w = torch.randn(2, 4, 8, 8), torch.randn(6, 4, 3, 3)
    want = F.conv2d(x, w, None, 1, "same")
    layer = nn.ConvTranspose2d(4, 3, 2, stride=2)
    want_t = layer(x)
    op.reset_counts()
    with cudnn_explorer.pinned(_empty_plans()) as report:
        got = F.conv2d(x, w, None, 1, "same")
        got_t = layer(x)
        F.relu(x)  # other functions run as they are
    assert report.plans == 0 and report.layers == []
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_t, want_t)
    assert op.pin_counts(reset=True).fallback_calls == 2
    F.conv2d(x, w)  # outside the context: not the op
    assert op.pin_counts().calls == 0


def test_routing_reaches_every_thread_and_no_other_function():
    """Note [routing by the functions' names]: under process routing, a convolution in
    another thread runs through the op too; other torch functions are PyTorch's own, with
    no mode between."""
    import threading

    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional, op

    relu, x, w = F.relu, torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    op.reset_counts()
    with functional.process_routing():
        assert functional.routed() and F.relu is relu
        assert not torch._C._is_torch_function_mode_enabled()
        t = threading.Thread(target=lambda: (F.conv2d(x, w),
                                             F.conv_transpose2d(x, w.transpose(0, 1))))
        t.start()
        t.join()
        assert op.pin_counts(reset=True).fallback_calls == 2  # CPU tensors: the op's fallback
    assert not functional.routed()


def test_routing_contexts_nest_and_the_last_one_gives_torch_its_functions_back():
    import pickle

    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional

    own = (F.conv2d, torch.conv2d, F.conv_transpose3d, torch.conv_transpose3d)
    with functional.process_routing():
        routed = F.conv2d
        assert routed is not own[0] and torch.conv2d is own[1]  # torch's names: its own
        with functional.process_routing():
            assert F.conv2d is routed
        assert F.conv2d is routed  # the outer context is still open
        pickled = pickle.dumps(F.conv2d)  # by reference, as torch.nn.functional's
        assert pickle.loads(pickled) is routed
    assert (F.conv2d, torch.conv2d, F.conv_transpose3d, torch.conv_transpose3d) == own
    assert pickle.loads(pickled) is own[0]


def test_routing_leaves_a_function_that_another_patcher_put_in_its_place():
    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional

    own, own2d = F.conv1d, F.conv2d

    def theirs(*a, **k):
        return own(*a, **k)
    with functional.process_routing():
        F.conv1d = theirs
    try:  # theirs stays; every other name is PyTorch's own again
        assert F.conv1d is theirs and torch.conv1d is own and F.conv2d is own2d
    finally:
        F.conv1d = own


def test_compiled_calls_under_routing_run_through_the_op():
    """torch.compile traces the routes by name: its graph holds the op (aot_eager here;
    the op's fallback for CPU tensors counts each call), with no graph break."""
    import torch.nn.functional as F  # noqa: F401

    from cudnn_explorer.pinning import functional, op

    torch._dynamo.reset()
    m = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.ConvTranspose2d(4, 2, 2, stride=2))
    x = torch.randn(2, 3, 8, 8, requires_grad=True)
    want = m(x)
    with functional.process_routing():
        compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
        op.reset_counts()
        got = compiled(x)
        got.sum().backward()
        counts = op.pin_counts(reset=True)
    torch._dynamo.reset()
    torch.testing.assert_close(got, want)
    assert counts.fallback_calls == 6  # 2 forward, 2 input gradients, 2 weight gradients


def test_script_and_a_later_compile_see_pytorchs_own_convolution_around_routing():
    """Note [routing and TorchScript]: torch.jit.script of a layer under routing compiles
    (the route is known as its aten op); and once routing ends, torch.compile takes
    PyTorch's own conv2d into its graph again, with no graph break."""
    from cudnn_explorer.pinning import functional

    x = torch.randn(1, 3, 8, 8)
    layer = nn.Conv2d(3, 4, 3)
    with functional.process_routing():
        scripted = torch.jit.script(nn.Sequential(layer, nn.ReLU()))
        torch._dynamo.reset()
        from torch._dynamo import trace_rules

        trace_rules.get_torch_obj_rule_map.cache_clear()  # made anew, while routed
        torch.compile(layer, backend="aot_eager")(x)
    torch.testing.assert_close(scripted(x), torch.relu(layer(x)))
    explained = torch._dynamo.explain(layer)(x)
    torch._dynamo.reset()
    assert explained.graph_count == 1 and explained.graph_break_count == 0


def test_a_route_leaves_fx_proxies_and_tensor_subclasses_to_pytorch():
    """Note [what a route leaves to PyTorch]: symbolic_trace of a layer that calls
    F.conv2d itself records the call by name; a subclass with a __torch_function__ of its
    own gets PyTorch's function, through its handler; a plain call goes through the op."""
    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional, op

    class Std(nn.Conv2d):
        def forward(self, x):
            w = (self.weight - self.weight.mean()) / (self.weight.std() + 1e-5)
            return F.conv2d(x, w, self.bias, self.stride, self.padding)

    class Logged(torch.Tensor):
        seen: list = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.seen.append(func)
            return super().__torch_function__(func, types, args, kwargs or {})

    class Wrapped(torch.Tensor):  # a __torch_dispatch__ of its own, as DTensor has
        @staticmethod
        def __new__(cls, elem):
            return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

        def __init__(self, elem):
            self.elem = elem

        __torch_function__ = torch._C._disabled_torch_function_impl

        @classmethod
        def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
            def un(t):
                return t.elem if isinstance(t, Wrapped) else t
            return func(*[un(a) for a in args], **{k: un(v) for k, v in (kwargs or {}).items()})

    from torch._subclasses.fake_tensor import FakeTensorMode

    m, x = nn.Sequential(Std(3, 4, 3), nn.ReLU()), torch.randn(2, 3, 8, 8)
    assert not functional._foreign(FakeTensorMode().from_tensor(x))  # compile's: the op
    with functional.process_routing():
        traced = torch.fx.symbolic_trace(m)
        op.reset_counts()
        F.conv2d(x.as_subclass(Logged), m[0].weight)
        assert op.pin_counts(reset=True).calls == 0 and Logged.seen
        torch.testing.assert_close(F.conv2d(Wrapped(x), m[0].weight),
                                   functional._ORIGINALS["conv2d"](x, m[0].weight))
        assert op.pin_counts(reset=True).calls == 0
        m(x)
        assert op.pin_counts(reset=True).fallback_calls == 1
    torch.testing.assert_close(traced(x), m(x))


def test_the_functional_context_stays_in_its_thread_and_its_block():
    """pinned()'s routing (a TorchFunctionMode): another thread's convolutions, and a
    reference taken inside the block but called after it, are PyTorch's own."""
    import threading

    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional, op

    x, w = torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3)
    inside, go_on = threading.Event(), threading.Event()

    def hold():
        with functional.pinned_functions():
            inside.set()
            go_on.wait(30)
    t = threading.Thread(target=hold)
    t.start()
    inside.wait(30)
    op.reset_counts()
    F.conv2d(x, w)  # this thread is in no block
    go_on.set()
    t.join()
    assert op.pin_counts(reset=True).calls == 0
    with functional.pinned_functions():
        kept = F.conv2d
        torch.conv2d(x, w)  # every name of the function, in the block
    kept(x, w)
    assert op.pin_counts(reset=True).fallback_calls == 1


def test_layers_with_a_convolution_of_their_own_are_skipped_with_the_reason():
    import cudnn_explorer

    class StdConv(nn.Conv2d):
        def forward(self, x):
            w = (self.weight - self.weight.mean()) / (self.weight.std() + 1e-5)
            return nn.functional.conv2d(x, w, self.bias, self.stride, self.padding)

    m = nn.Sequential(StdConv(3, 4, 3), nn.Conv2d(4, 4, 1), nn.LazyConv2d(4, 1))
    report = cudnn_explorer.pin(m, _empty_plans())
    assert report.layers == ["1"]
    assert report.skipped[0].startswith("0: its class StdConv has a convolution of its own")
    assert report.skipped[1].startswith("2: a lazy layer")
    cudnn_explorer.unpin(m)


def test_gradcheck_and_opcheck_through_the_op():
    from cudnn_explorer.pinning import op

    conv = op.ops().conv
    x = torch.randn(2, 4, 7, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w, b: conv(x, w, b, [2, 1], [1], [1], False, [0], 2), (x, w, b))
    wt = torch.randn(4, 3, 3, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, w: conv(x, w, None, [2], [1], [1], True, [1], 2), (x, wt))
    args = (x.detach().float().requires_grad_(), w.detach().float().requires_grad_(),
            b.detach().float().requires_grad_(), [2, 1], [1], [1], False, [0], 2)
    torch.library.opcheck(conv, args)
    xt = torch.randn(2, 4, 5, 5).contiguous(memory_format=torch.channels_last)
    torch.library.opcheck(conv, (xt.requires_grad_(), wt.detach().float().requires_grad_(),
                                 None, [2], [1], [1], True, [1], 2))


def test_torch_compile_runs_pinned_layers_without_a_graph_break():
    import cudnn_explorer

    ref, m = _net(), _net()
    x = torch.randn(2, 3, 11, 10)
    want = ref(x)
    cudnn_explorer.pin(m, _empty_plans())
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    got = compiled(x)
    got.sum().backward()
    torch.testing.assert_close(got, want)
    assert all(p.grad is not None for p in m.parameters())
    cudnn_explorer.unpin(m)


def test_bad_plans_arguments_are_one_clear_error(tmp_path):
    import cudnn_explorer
    from cudnn_explorer.core.errors import UserError

    m = nn.Conv2d(1, 1, 1)
    with pytest.raises(UserError, match="give a plan file's path or a PlanFile"):
        cudnn_explorer.pin(m, 42)
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(UserError, match="not a cudnn_explorer plan file"):
        cudnn_explorer.pin(m, str(bad))
    with pytest.raises(UserError, match="missing.json"):
        cudnn_explorer.pin(m, str(tmp_path / "missing.json"))
    assert type(m) is nn.Conv2d
    for model in (None, "resnet50", [m]):  # not a module: refused before the plans load
        with pytest.raises(UserError, match="give a torch.nn.Module"):
            cudnn_explorer.pin(model, str(tmp_path / "missing.json"))
        with pytest.raises(UserError, match="give a torch.nn.Module"):
            cudnn_explorer.unpin(model)


def test_pin_counts_totals():
    from cudnn_explorer.core.pin_report import PinCounts, PinnedDirection

    c = PinCounts(directions=[
        PinnedDirection(key=[1], description="a", covered=True, ran="eng1", pinned_calls=3),
        PinnedDirection(key=[2], description="b", covered=False, fallback_calls=2,
                        reason="the plan file does not cover it")])
    assert (c.calls, c.pinned_calls, c.fallback_calls) == (5, 3, 2)
    assert [d.description for d in c.fallbacks] == ["b"]
    assert c.plans_ran == ["a: eng1"]


def test_the_model_process_runs_a_pinned_mode_and_records_what_ran(tmp_path, monkeypatch):
    """model/mode_child.py's pinned mode, on the CPU: the layers pinned, the first
    iteration's calls probed through the op (8 per iteration), and the op's own counts of
    the first and the steady iterations (all fallbacks here: no GPU)."""
    import json

    from cudnn_explorer.core.child_records import ModelChildResult
    from cudnn_explorer.model import mode_child

    from conftest import tiny_factory

    tiny_factory(tmp_path, monkeypatch, "tinypin", convs=3)
    plans = tmp_path / "tiny.plans.json"
    plans.write_text(_empty_plans().to_json())
    spec = {"model": {"factory": "tinypin:tiny", "input_shape": [3, 8, 8], "batch": 2},
            "shapes": [[3, 8, 8]], "mode": "pinned", "plans": str(plans), "device": -1,
            "iterations": 3, "warmup": 1}
    written = []
    out = mode_child.run(spec, written.append)
    result = ModelChildResult.read(json.loads(json.dumps(out)), "result")
    assert result.pin_report.layers == ["0", "2", "3"]
    size = result.sizes[0]
    assert size.conv_calls == 8
    assert size.pinned_first.calls == 8 and size.pinned_first.pinned_calls == 0
    assert size.pinned_steady.calls == 8 * 3
    with pytest.raises(ValueError, match="needs the spec's 'plans'"):
        mode_child.run(dict(spec, plans=""), written.append)


def _rank(rank, world, init, plans_path, gpus, out_dir):
    """One gloo rank of the test below: pins with the file only rank 0 reads, and a GPU
    name of its own (``gpus[rank]``) as its environment; writes what it got."""
    import json
    import os

    import torch.distributed as dist

    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.core.exploration import Environment
    from cudnn_explorer.pinning import modules, op

    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=world)
    modules._here = lambda: Environment(gpu_name=gpus[rank], compute_capability="9.0",
                                        cudnn_runtime="91900", cudnn_frontend="13200",
                                        torch_version="2.11.0")
    path = plans_path if rank == 0 else os.path.join(out_dir, "only-rank-0-reads-it.json")
    got = {}
    try:  # a file rank 0 cannot read: every rank says so
        modules.pin(torch.nn.Conv2d(3, 4, 3), os.path.join(out_dir, "missing.json"),
                    group=dist.group.WORLD)
    except UserError as e:
        got["missing"] = str(e)
    for allow in (False, True):
        try:
            report = modules.pin(torch.nn.Conv2d(3, 4, 3), path, allow_environment=allow,
                                 group=dist.group.WORLD)
            got[str(allow)] = {"plans": report.plans,
                               "differences": report.environment_differences,
                               "native": op.native.load().loaded_plan_count()}
        except UserError as e:
            got[str(allow)] = {"error": str(e)}
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(got, f)
    dist.destroy_process_group()


@pytest.mark.parametrize("gpus", [["NVIDIA H200", "NVIDIA H200"],
                                  ["NVIDIA H200", "NVIDIA A100"]], ids=["same", "rank1-differs"])
def test_under_torch_distributed_every_rank_pins_rank_0s_file(tmp_path, gpus):
    """Two gloo ranks pinning with a group: rank 0 reads the plan file and rank 1, which
    has no copy of it, pins the same plans; a rank whose environment differs is refused on
    both ranks, naming it, unless allow_environment."""
    import json

    import torch.multiprocessing as mp

    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.model.tracer import problem_of
    from pinning_helpers import entry

    problem = problem_of(torch.randn(2, 3, 8, 8), torch.randn(4, 3, 3, 3), [1, 1], [0, 0],
                         [1, 1], 1, True)
    plans = PlanFile(environment=PlanEnvironment(gpu_name="NVIDIA H200",
                                                 compute_capability="9.0", cudnn="91900",
                                                 cudnn_frontend="13200", torch="2.11.0"),
                     entries=[entry(problem, "fwd", "ConvFwd_eng0"),
                              entry(problem, "bwd-filter", "ConvBwdFilter_eng1_k2=3")])
    path = tmp_path / "shared.plans.json"
    path.write_text(plans.to_json())
    mp.spawn(_rank, args=(2, str(tmp_path / "init"), str(path), gpus, str(tmp_path)), nprocs=2)
    got = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in (0, 1):
        assert got[r]["missing"].startswith("rank 0: ") and "missing.json" in got[r]["missing"]
        allowed = got[r]["True"]
        assert allowed["plans"] == allowed["native"] == 2, allowed
        if gpus[1] == gpus[0]:
            assert got[r]["False"]["plans"] == 2 and got[r]["False"]["differences"] == []
        else:
            err = got[r]["False"]["error"]
            assert "on 1 of 2 ranks" in err and \
                "rank 1: GPU NVIDIA A100 here, NVIDIA H200 in the file" in err, err
            assert allowed["differences"] == ["rank 1: GPU NVIDIA A100 here, NVIDIA H200 "
                                              "in the file"]


def test_the_pinned_mode_of_a_models_run_on_the_cpu(tmp_path, monkeypatch):
    """run_model with the pinned mode (advise --plans): its fresh process pins the model,
    its sizes carry the op's record, it needs no cudnn-frontend log, and it gives no
    problem a PyTorch pick (the pinned mode is the model's run only)."""
    from dataclasses import replace

    from cudnn_explorer.core.capture import ModelSpec, merge_sizes
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure.pytorch_picks import ModeSpec
    from cudnn_explorer.model import run_modes
    from cudnn_explorer.model.tracer import capture

    from conftest import tiny_factory

    tinypin2 = tiny_factory(tmp_path, monkeypatch, "tinypin2")
    spec = ModelSpec(factory="tinypin2:tiny", input_shape=[3, 8, 8], batch=2, sizes=[8, 12])
    caps = [capture(tinypin2.tiny(), [torch.randn(2, 3, s, s)],
                    replace(spec, input_shape=[3, s, s], sizes=[]), "cpu") for s in (8, 12)]
    cap = merge_sizes(caps, [8, 12], spec)
    plans = tmp_path / "p.plans.json"
    plans.write_text(_empty_plans().to_json())
    mode = ModeSpec("pinned (uncovered: benchmark off)", "pinned", plans=str(plans),
                    plans_sha="0" * 64)
    run, per = run_modes.run_model(cap, ExploreOptions.create(child_timeout_s=120),
                                   run_modes.ModeTiming(iterations=3, warmup=1, device=-1),
                                   modes=[mode])
    m = run.mode("pinned")
    assert m is not None and m.ok and not m.error, m.error
    assert [s.input_shape for s in m.sizes] == [[3, 8, 8], [3, 12, 12]]
    for s in m.sizes:  # 2 forward, 1 + 2 backward calls: all fallbacks on the CPU
        assert s.pinned.calls == 5 and s.pinned.fallback_calls == 5
    assert all(rs == [] for rs in per.values())
    from cudnn_explorer.report.model import render_model_run

    text = " ".join(render_model_run(run, cap).split())  # as one line
    assert "pinned (uncovered: benchmark off): 0 of 5 convolution calls of the first " \
           "iteration ran the plan file's plans, 5 PyTorch's own" in text
    assert "not pinned: a convolution: its tensors are not on a CUDA device" in text
    assert "costliest first calls with pinned (uncovered: benchmark off)" in text
    other = replace(mode, plans_sha="1" * 64)
    keys = {run_modes.run_key(cap, x, 0, ExploreOptions.create(), 3, 1, None)
            for x in (mode, other, replace(mode, benchmark=True))}
    assert len(keys) == 3  # another file or setting is another run in the results store


def test_the_eager_entry_is_the_same_op_for_autograd_and_dispatch_modes():
    """Note [eager entry]: plain tensors take the extension's direct entry, which reaches
    the same dispatcher op: its autograd node, and a TorchDispatchMode sees the op; a
    TorchFunctionMode gets the torch.ops overload."""
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode

    from cudnn_explorer.pinning import functional

    x = torch.randn(2, 4, 6, 6, requires_grad=True)
    w = torch.randn(5, 4, 3, 3, requires_grad=True)
    args = ((1, 1), (1, 1), (1, 1), False, (0, 0), 1)
    out = functional.call(x, w, None, *args)
    assert "PinnedConv" in out.grad_fn.name()
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, None, 1, 1))
    seen = []

    class Seen(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), kw=None):
            seen.append(str(func))
            return func(*a, **(kw or {}))

    with Seen():
        functional.call(x, w, None, *args).sum().backward()
    assert "cudnn_explorer.conv.default" in seen
    assert "cudnn_explorer.conv_backward.default" in seen
    funcs = []

    class Funcs(TorchFunctionMode):
        def __torch_function__(self, func, types, a=(), kw=None):
            funcs.append(str(func))
            return func(*a, **(kw or {}))

    with Funcs():
        functional.call(x, w, None, *args)
    assert any("cudnn_explorer.conv" in f for f in funcs), funcs


def test_a_plan_file_from_a_multi_size_sweep_covers_every_size(tmp_path, monkeypatch):
    """A --sizes capture feeds plans write: every call the op makes at every size (its
    three directions' keys, from real tensors in the model's layout) is one of the file's
    keys, and a size the sweep did not capture is not."""
    from dataclasses import replace

    from cudnn_explorer.core.capture import ModelSpec, merge_sizes
    from cudnn_explorer.core.plans import native_key, plans_from
    from cudnn_explorer.core.records import DirectionResult, EngineConfig, EngineSpace
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op
    from fakes import ENV, timing

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)).to(
        memory_format=torch.channels_last)
    spec = ModelSpec(factory="x:y", input_shape=[3, 8, 8], batch=2, sizes=[8, 12],
                     channels_last=True)

    def batch(s):
        return torch.randn(2, 3, s, s).contiguous(memory_format=torch.channels_last)

    caps = [capture(net, [batch(s)], replace(spec, input_shape=[3, s, s], sizes=[]), "cpu")
            for s in (8, 12)]
    cap = merge_sizes(caps, [8, 12], spec)
    assert len(cap.problems) == 4  # two layers at two sizes
    items = []
    for u in cap.problems:
        for d in u.directions:
            cfg = EngineConfig(tag="ConvFwd_eng0", engine=0, status="OK",
                               timing=timing(0.01), workspace_bytes=0)
            items.append((u.problem, DirectionResult(
                direction=d, math_type="DEFAULT_MATH", find=[], heuristics=[], workspace=[],
                workspace_needed_bytes=0, workspace_given_bytes=0,
                engines=EngineSpace(engine_count=1, configs=[cfg])), u.layers, 1))
    plans = plans_from(items, ENV, "test")
    keys = {tuple(native_key(e)) for e in plans.entries}
    assert len(keys) == len(plans.entries) == sum(len(u.directions) for u in cap.problems)

    def call_keys(s):
        x, out = batch(s), []
        for layer in (net[0], net[2]):
            ks = op.conv_keys(x, layer.weight, layer.stride, layer.padding, layer.dilation)
            out += [tuple(k) for k in ks]
            x = layer(x)
        return out

    for s in (8, 12):
        wanted = call_keys(s)
        # the first layer's input needs no gradient: its bwd-data is not in the file
        assert [k in keys for k in wanted] == [True, False, True, True, True, True], s
    assert not any(k in keys for k in call_keys(10))


def test_per_sample_gradients_under_routing_go_through_the_op():
    """Note [per-sample gradients under routing]: torch's per-sample gradients
    (ExpandedWeight, call_for_per_sample_grads) of 1-D and 2-D convolutions under
    routing equal unrouted ones, and the forward calls reach the op; in a pinned() block
    they are right too (PyTorch's own convolution)."""
    from torch.nn.utils._per_sample_grad import call_for_per_sample_grads

    from cudnn_explorer.pinning import functional, op

    torch.manual_seed(0)
    for layer, x in ((nn.Conv2d(3, 4, 3, padding=1), torch.randn(5, 3, 8, 8)),
                     (nn.Conv1d(3, 4, 3, stride=2), torch.randn(5, 3, 9))):
        model = nn.Sequential(layer, nn.Tanh())
        call_for_per_sample_grads(model)(x).square().sum().backward()
        want = [p.grad_sample.clone() for p in model.parameters()]
        for p in model.parameters():
            del p.grad_sample
        with functional.process_routing():
            op.reset_counts()
            call_for_per_sample_grads(model)(x).square().sum().backward()
            counts = op.pin_counts(reset=True)
        for p, w in zip(model.parameters(), want):
            torch.testing.assert_close(p.grad_sample, w)
            del p.grad_sample
        assert counts.fallback_calls >= 1, counts  # the forward ran the op (CPU: fell back)
        with functional.pinned_functions():  # a pinned() block: right, though unpinned
            call_for_per_sample_grads(model)(x).square().sum().backward()
        for p, w in zip(model.parameters(), want):
            torch.testing.assert_close(p.grad_sample, w)
