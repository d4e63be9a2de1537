"""Capture on the CPU: what cuDNN would see of a model's iteration (no cuDNN needed)."""
import json

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from cudnn_explorer.core.capture import Capture, ModelSpec  # noqa: E402
from cudnn_explorer.core.errors import UserError  # noqa: E402
from cudnn_explorer.model import zoo  # noqa: E402
from cudnn_explorer.model.tracer import capture  # noqa: E402


class Net(nn.Module):
    """Two identical 3x3 blocks (one problem, called twice), a strided conv, a 1-D conv
    over a reshaped map, and a transposed conv."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.a = nn.Conv2d(8, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 3, padding=1)
        self.down = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.seq = nn.Conv1d(16, 4, 5, padding=2)
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)

    def forward(self, x):
        x = self.b(self.a(self.stem(x)))
        x = self.down(x)
        y = self.seq(x.flatten(2))
        return y.mean() + self.up(x).mean()


def run(spec, model=None):
    model = model or Net()
    x = torch.randn(spec.batch, *spec.input_shape)
    if spec.channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    return capture(model, [x], spec, "cpu")


SPEC = dict(name="net", input_shape=[3, 16, 16], batch=2)


def by_layer(cap):
    return {layer: u for u in cap.problems for layer in u.layers}


def test_every_direction_following_output_mask_deduplicated_with_call_counts():
    cap = run(ModelSpec(**SPEC, train=True))
    layers = by_layer(cap)
    assert set(layers) == {"stem", "a", "b", "down", "seq", "up (transposed)"}
    assert layers["a"] is layers["b"]  # one problem, two layers
    assert layers["a"].calls == {"fwd": 2, "bwd-data": 2, "bwd-filter": 2}
    assert layers["stem"].calls == {"fwd": 1, "bwd-filter": 1}  # the input needs no grad
    assert layers["down"].problem.stride == (2, 2) and layers["down"].problem.out_channels == 16
    seq = layers["seq"].problem
    assert seq.spatial_dims == 1 and seq.input_shape == (2, 16, 64) and seq.kernel == (5,)
    # the transposed convolution: the convolution PyTorch runs it as (Note [transposed]),
    # 2x8x16x16 -> 2x16x8x8: its forward as backward-data, its input's gradient as forward
    up = layers["up (transposed)"]
    assert up.problem.input_shape == (2, 8, 16, 16) and up.problem.out_channels == 16
    assert up.problem.kernel == (2, 2) and up.problem.stride == (2, 2)
    assert up.calls == {"bwd-data": 1, "fwd": 1, "bwd-filter": 1}
    assert cap.uncovered == []
    assert cap.conv_calls == sum(sum(u.calls.values()) for u in cap.problems) == 17


@pytest.mark.parametrize("nsp,stride,padding,output_padding,dilation,groups", [
    (2, (2, 2), (1, 1), (1, 1), (1, 1), 1), (2, (3, 2), (0, 2), (2, 0), (1, 2), 2),
    (1, (2,), (1,), (0,), (3,), 4), (3, (2, 1, 2), (1, 0, 0), (1, 0, 1), (1, 1, 1), 1)])
def test_a_transposed_convolution_is_the_adjoint_problem_pytorch_runs(
        nsp, stride, padding, output_padding, dilation, groups):
    """The problem recorded for a transposed convolution computes it: its backward-data
    of the transposed call's input is the transposed call's output."""
    from cudnn_explorer.model.tracer import problem_of

    x = torch.randn(2, 8, *[5, 6, 7][:nsp], dtype=torch.float64)
    w = torch.randn(8, 12 // groups, *[3, 2, 3][:nsp], dtype=torch.float64)
    conv_t = {1: torch.nn.functional.conv_transpose1d, 2: torch.nn.functional.conv_transpose2d,
              3: torch.nn.functional.conv_transpose3d}[nsp]
    grad_in = {1: torch.nn.grad.conv1d_input, 2: torch.nn.grad.conv2d_input,
               3: torch.nn.grad.conv3d_input}[nsp]
    y = conv_t(x, w, stride=stride, padding=padding, output_padding=output_padding,
               groups=groups, dilation=dilation)
    p = problem_of(x.float(), w.float(), stride, padding, dilation, groups, True, True,
                   output_padding)
    assert p.input_shape == tuple(y.shape) and p.weight_shape == tuple(w.shape)
    assert p.output_shape == tuple(x.shape)
    assert torch.allclose(grad_in(p.input_shape, w, x, stride, padding, dilation, groups), y)


def test_a_transposed_convolution_with_no_adjoint_is_listed_as_not_covered():
    # output_padding 1 with stride 1 (PyTorch takes it when the dilation is larger)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ConvTranspose2d(4, 4, 3, stride=1,
                                                                 output_padding=1, dilation=2))
    cap = run(ModelSpec(**SPEC), model=model)
    (up,) = cap.uncovered
    assert up.layer == "1 (transposed)" and "output_padding [1, 1]" in up.why
    assert up.calls == 3 and len(cap.problems) == 1


def test_inference_is_forward_only():
    cap = run(ModelSpec(**SPEC, train=False))
    # (a transposed convolution's forward is the backward-data of its problem)
    assert {layer: set(u.calls) for layer, u in by_layer(cap).items()} == {
        "stem": {"fwd"}, "a": {"fwd"}, "b": {"fwd"}, "down": {"fwd"}, "seq": {"fwd"},
        "up (transposed)": {"bwd-data"}}
    assert by_layer(cap)["a"].calls == {"fwd": 2}


@pytest.mark.parametrize("amp,dtype", [("off", "float32"), ("bf16", "bfloat16"),
                                       ("fp16", "float16")])
def test_amp_gives_the_dtype_cudnn_gets(amp, dtype):
    cap = run(ModelSpec(**SPEC, amp=amp))
    assert {u.problem.dtype for u in cap.problems} == {dtype}
    tf32 = {u.problem.tf32 for u in cap.problems}
    assert tf32 == ({torch.backends.cudnn.allow_tf32} if dtype == "float32" else {None})


def test_channels_last_strides_give_nhwc():
    cap = run(ModelSpec(**SPEC, channels_last=True))
    layout = {layer: u.problem.layout for layer, u in by_layer(cap).items()}
    assert layout == {"stem": "nhwc", "a": "nhwc", "b": "nhwc", "down": "nhwc", "seq": "nchw",
                      "up (transposed)": "nhwc"}
    plain = run(ModelSpec(**SPEC))
    assert {u.problem.layout for u in plain.problems} == {"nchw"}
    # different layouts are different problems to PyTorch's cache
    assert by_layer(cap)["a"].problem != by_layer(plain)["a"].problem


def _strided(sizes, perm):
    """A dense tensor of ``sizes`` laid out in the dimension order ``perm`` (outermost
    first), e.g. (0, 2, 3, 1) for channels_last."""
    return torch.empty([sizes[d] for d in perm]).permute(
        *[perm.index(d) for d in range(len(sizes))])


AMBIGUOUS = [(16, 120, 1, 1), (2, 1, 5, 5), (1, 8, 1, 1), (4, 1, 1, 1), (2, 3, 1, 7),
             (2, 3, 7, 1), (2, 0, 3, 3), (2, 8, 4, 4), (2, 3, 1, 1, 1), (2, 1, 3, 4, 4),
             (2, 4, 3, 4, 5)]


def _cpp_rule(t) -> bool:
    """c10's own answer, Tensor::suggest_memory_format, read off a CPU kernel whose output
    is allocated in its input's suggested format (upsample_nearest's C++ meta function):
    True (channels_last) or False; None where both formats give these sizes the same
    strides and the output cannot tell."""
    sizes = tuple(t.shape)
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    cl, plain = torch.empty(sizes, memory_format=fmt).stride(), torch.empty(sizes).stride()
    if cl == plain or 0 in sizes:
        return None
    up = torch._C._nn.upsample_nearest2d if t.dim() == 4 else torch._C._nn.upsample_nearest3d
    out = up(t, list(sizes[2:])).stride()
    assert out in (cl, plain), out
    return out == cl


@pytest.mark.parametrize("sizes", AMBIGUOUS, ids=lambda s: "x".join(map(str, s)))
def test_a_tensors_layout_is_decided_by_its_strides_as_pytorch_decides(sizes):
    """Note [ambiguous strides]: layout_of follows c10's stride rule, which the cuDNN path
    uses, for tensors contiguous in both formats (C = 1, H = W = 1) among others, each
    laid out every way, beside a contiguous weight (never channels_last by its strides).
    Among them a transposed sequence given an axis of size 1 (2x3x7x1 laid out N, H, C,
    W: strides 21, 1, 3, 1), which c10 calls contiguous and an older Python copy of the
    rule in torch._prims_common called channels_last."""
    import itertools

    from cudnn_explorer.model.tracer import layout_of

    w = torch.empty(4, max(sizes[1], 1), *[3] * (len(sizes) - 2))
    decided = 0
    for perm in itertools.permutations(range(len(sizes))):
        t = _strided(sizes, list(perm))
        want = _cpp_rule(t)
        if want is not None:
            decided += 1
            assert (layout_of(t, w) == "nhwc") == want, (perm, t.stride())
    if 0 not in sizes and len(set(sizes[1:])) > 1:
        assert decided, sizes
    if sizes == (2, 3, 7, 1):
        t = _strided(sizes, [0, 2, 1, 3])
        assert t.stride() == (21, 1, 3, 1) and layout_of(t, w) == "nchw"


def test_float64_and_1d_convolutions_are_never_nhwc():
    from cudnn_explorer.model.tracer import layout_of

    x = torch.empty(2, 3, 8, 8).to(memory_format=torch.channels_last)
    w = torch.empty(4, 3, 3, 3)
    assert layout_of(x, w) == "nhwc"
    assert layout_of(x.double(), w.double()) == "nchw"
    assert layout_of(torch.empty(2, 7, 3).transpose(1, 2), torch.empty(4, 3, 3)) == "nchw"


class SqueezeExcite(nn.Module):
    """A squeeze-and-excitation block: its 1x1 convolutions run on N x C x 1 x 1 maps."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.fc1, self.fc2 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)

    def forward(self, x):
        x = self.conv(x)
        s = torch.nn.functional.adaptive_avg_pool2d(x, 1)
        return (x * self.fc2(torch.relu(self.fc1(s))).sigmoid()).mean()


def test_a_channels_last_models_1x1_maps_are_nhwc_as_pytorch_runs_them():
    """Note [ambiguous strides]: the squeeze-and-excitation convolutions of a channels_last
    model (x N x C x 1 x 1, contiguous in both formats) are NHWC problems, as PyTorch
    gives them to cuDNN; in a contiguous model they stay NCHW."""
    cap = run(ModelSpec(**SPEC, channels_last=True), SqueezeExcite())
    layout = {layer: u.problem.layout for layer, u in by_layer(cap).items()}
    assert layout == {"conv": "nhwc", "fc1": "nhwc", "fc2": "nhwc"}
    assert by_layer(cap)["fc1"].problem.input_shape[2:] == (1, 1)
    plain = run(ModelSpec(**SPEC), SqueezeExcite())
    assert {u.problem.layout for u in plain.problems} == {"nchw"}


def test_capture_round_trips_through_json():
    cap = run(ModelSpec(**SPEC, amp="bf16", channels_last=True))
    again = Capture.from_json_dict(json.loads(cap.to_json()))
    assert again.problems == cap.problems and again.uncovered == cap.uncovered
    assert again.model == cap.model


def test_model_without_convolutions():
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 4))
    cap = run(ModelSpec(**SPEC), model=model)
    assert cap.problems == [] and cap.uncovered == [] and cap.conv_calls == 0


def test_torchvision_model_by_name_and_bad_names():
    pytest.importorskip("torchvision")
    spec = ModelSpec(name="resnet18", input_shape=[3, 32, 32], batch=2, amp="bf16",
                     channels_last=True)
    model, inputs = zoo.build(spec, "cpu")
    cap = capture(model, inputs, spec, "cpu")
    layers = by_layer(cap)
    assert "conv1" in layers and "layer2.0.downsample.0" in layers
    assert layers["layer2.0.downsample.0"].problem.kernel == (1, 1)
    assert "bwd-data" not in layers["conv1"].calls
    with pytest.raises(UserError, match="unknown model 'resnet5'; close names: resnet50"):
        zoo.build(ModelSpec(name="resnet5", input_shape=[3, 8, 8]), "cpu")
    # arguments the model does not take: the message names them, not "without arguments"
    with pytest.raises(UserError, match=r"model 'resnet18' cannot be built with "
                                        r"\{'nosuch': 1\}: TypeError: .*nosuch"):
        zoo.build(ModelSpec(name="resnet18", input_shape=[3, 8, 8], model_args={"nosuch": 1}),
                  "cpu")


def test_factory_errors_name_the_factory(tmp_path, monkeypatch):
    (tmp_path / "mymodels.py").write_text(
        "import torch\n"
        "def good():\n    return torch.nn.Conv2d(3, 4, 3)\n"
        "def bad():\n    raise RuntimeError('no weights here')\n"
        "def odd():\n    return 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = dict(input_shape=[3, 8, 8], batch=1)
    model, inputs = zoo.build(ModelSpec(factory="mymodels:good", **spec), "cpu")
    assert isinstance(model, nn.Conv2d)
    for factory, match in (("mymodels:bad", "raised RuntimeError: no weights here"),
                           ("mymodels:odd", "returned int, not a torch.nn.Module"),
                           ("mymodels:none", "has no callable none"),
                           ("nomodule:f", "cannot import nomodule"),
                           ("justaname", "expected pkg.module:factory"),
                           (f"{tmp_path}/mymodels.py:good",
                            "is a file path; give the module's import name "
                            r"\(pkg.module:good\), with its folder on PYTHONPATH")):
        with pytest.raises(UserError, match=match):
            zoo.build(ModelSpec(factory=factory, **spec), "cpu")
    monkeypatch.chdir(tmp_path)  # a file named like a module, in the working folder
    with pytest.raises(UserError, match="cannot import mymodels.py: .*; mymodels.py is a "
                                        "file: give the module's import name"):
        zoo.build(ModelSpec(factory="mymodels.py:good", **spec), "cpu")


def test_sizes_merge_and_count_new_problems():
    from cudnn_explorer.core.capture import merge_sizes

    # after the adaptive pool every size runs the same problem; before it, each its own
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.AdaptiveAvgPool2d(4),
                        nn.Conv2d(8, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1),
                        nn.ConvTranspose2d(8, 2, 2, stride=2))
    sizes = [16, 24, 32]
    caps = [run(ModelSpec(name="net", input_shape=[3, s, s], batch=2), model=net)
            for s in sizes]
    merged = merge_sizes(caps, sizes, ModelSpec(name="net", input_shape=[3, 16, 16], batch=2,
                                                sizes=sizes))
    assert [len(s.new) for s in merged.sizes] == [3, 1, 1]
    assert [len(s.problems) for s in merged.sizes] == [3, 3, 3]
    assert len(merged.problems) == 5 and merged.conv_calls == sum(c.conv_calls for c in caps)
    up = next(u for u in merged.problems if u.layers == ["4 (transposed)"])
    assert up.calls == up.transposed_calls == {"bwd-data": 3, "fwd": 3, "bwd-filter": 3}
    shared = next(u for u in merged.problems if u.problem.input_shape == (2, 8, 4, 4))
    assert shared.calls == {"fwd": 6, "bwd-data": 6, "bwd-filter": 6}  # 2 layers x 3 sizes
    assert shared.layers == ["2", "3"]
    again = Capture.from_json_dict(json.loads(merged.to_json()))
    assert again.sizes == merged.sizes and "for S in 16, 24, 32" in again.model.describe()


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, a, b):
        return self.conv(a) + self.conv(b)


@pytest.mark.parametrize("model,shape,match", [
    # PyTorch's own refusal, in PyTorch's words, naming the model and its input
    (nn.Conv2d(3, 4, 5), [3, 3, 3], "the model failed on its input: RuntimeError: "),
    (nn.Conv2d(3, 4, 3), [2, 8, 8], "expected input.* to have 3 channels"),
    (TwoInputs(), [3, 8, 8], "TypeError: .*forward\\(\\) missing 1 required"),
])
def test_a_model_that_fails_on_its_input_is_a_user_error(model, shape, match):
    spec = ModelSpec(name="mine", input_shape=shape, batch=1)
    with pytest.raises(UserError, match=match) as e:
        run(spec, model=model)
    assert str(e.value).startswith("mine, input 1x") and "--input" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_convolution_pytorch_runs_but_the_tool_refuses_is_listed_not_fatal(monkeypatch):
    from cudnn_explorer.model import tracer as cap_mod

    real = cap_mod.problem_of

    def picky(x, w, *args):
        if w.shape[2] == 1 and w.shape[3] == 1:  # pretend the tool cannot take 1x1
            raise UserError("--kernel 1: refused for this test")
        return real(x, w, *args)

    monkeypatch.setattr(cap_mod, "problem_of", picky)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 1))
    cap = run(ModelSpec(**SPEC), model=model)
    assert [u.problem.kernel for u in cap.problems] == [(3, 3)]
    (u,) = cap.uncovered
    assert u.why == "not a problem the tool explores: --kernel 1: refused for this test"
    assert u.layer == "1" and u.calls == 3  # forward, backward-data, backward-filter
    assert cap.conv_calls == 3 + 2  # the 3x3 stem has no backward-data


def test_torchvision_backbones_are_built_without_downloading(monkeypatch):
    tv = pytest.importorskip("torchvision")
    seen = {}
    real = tv.models.get_model

    def spy(name, **kwargs):
        seen[name] = kwargs
        return real(name, **kwargs)

    monkeypatch.setattr(tv.models, "get_model", spy)
    model, _ = zoo.build(ModelSpec(name="fcn_resnet50", input_shape=[3, 32, 32]), "cpu")
    assert seen["fcn_resnet50"] == {"weights": None, "weights_backbone": None}
    zoo.build(ModelSpec(name="resnet18", input_shape=[3, 32, 32]), "cpu")
    assert seen["resnet18"] == {"weights": None}


def test_forward_tracker_names_the_innermost_module_and_leaves_no_hook():
    import torch
    from torch.nn.modules import module as mod

    from cudnn_explorer.model.tracer import ForwardTracker

    seen = []

    class Probe(torch.nn.Module):
        def forward(self, x):
            seen.append(tracker.layer())
            return x

    net = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Conv2d(1, 1, 1), Probe()))
    before = (len(mod._global_forward_pre_hooks), len(mod._global_forward_hooks))
    with ForwardTracker(net) as tracker:
        assert tracker.layer() == "(outside any module)"
        net(torch.zeros(1, 1, 2, 2))
        assert tracker.layer() == "(outside any module)"
    assert seen == ["0.1"]
    assert (len(mod._global_forward_pre_hooks), len(mod._global_forward_hooks)) == before


def test_a_spec_over_sizes_keeps_channels_and_frames():
    image = ModelSpec(name="m", input_shape=[1, 64, 48], batch=2).over_sizes([32, 40])
    assert image.input_shape == [1, 32, 32] and image.at_size(40).input_shape == [1, 40, 40]
    assert "input 2x1xSxS for S in 32, 40" in image.describe()
    video = ModelSpec(name="m", input_shape=[3, 8, 112, 112]).over_sizes([96])
    assert video.input_shape == [3, 8, 96, 96] and video.at_size(96).sizes == []
    signal = ModelSpec(name="m", input_shape=[2, 1000]).over_sizes([500, 800])
    assert signal.at_size(800).input_shape == [2, 800]
    assert "input 1x2xS for S in 500, 800" in signal.describe()


def test_float32_problems_follow_the_convolutions_tf32_setting_under_either_api():
    """A capture's float32 problems carry cuDNN convolutions' TF32 setting, set by the
    legacy flag or by the per-operator one alone (whose mix makes the legacy getter
    raise)."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    precision = getattr(conv, "fp32_precision", None)
    legacy = torch.backends.cudnn.allow_tf32
    try:
        assert {u.problem.tf32 for u in run(ModelSpec(**SPEC, train=False)).problems} == {True}
        torch.backends.cudnn.allow_tf32 = False
        assert {u.problem.tf32 for u in run(ModelSpec(**SPEC, train=False)).problems} == {False}
        torch.backends.cudnn.allow_tf32 = True
        if precision is not None:
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            problems = run(ModelSpec(**SPEC, train=False)).problems
            assert {u.problem.tf32 for u in problems} == {False}
    finally:
        if precision is not None:
            torch.backends.cudnn.conv.fp32_precision = precision
        torch.backends.cudnn.allow_tf32 = legacy
