"""Models from where users get them, on the CPU: timm by name (its own input size), a
factory with keyword arguments, and inputs of the user's own (a dict of tensors)."""
import os
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from conftest import run_cli  # noqa: E402
from cudnn_explorer.core.capture import ModelSpec  # noqa: E402
from cudnn_explorer.core.errors import MissingDependencyError, UserError  # noqa: E402
from cudnn_explorer.model import zoo  # noqa: E402
from cudnn_explorer.model.tracer import capture_model  # noqa: E402

NETS = textwrap.dedent("""\
    import torch
    class Two(torch.nn.Module):
        def __init__(self, width=4):
            super().__init__()
            self.image = torch.nn.Conv2d(3, width, 3, padding=1)
            self.mask = torch.nn.Conv2d(1, width, 1)
        def forward(self, image, mask):
            return self.image(image) + self.mask(mask)
    def two(width=4):
        return Two(width)
    def inputs(batch, shape, device):
        c, h, w = shape
        return {"image": torch.randn(batch, c, h, w, device=device),
                "mask": torch.randn(batch, 1, h, w, device=device)}
    def boom(width=4):
        raise RuntimeError("no such width")
    """)


@pytest.fixture
def nets(tmp_path, monkeypatch):
    (tmp_path / "sourcenets.py").write_text(NETS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(tmp_path) + os.pathsep
            + os.environ.get("PYTHONPATH", "")}


def _seen(model, inputs):
    """(input shape, weight shape) of every aten.convolution an independent
    TorchDispatchMode sees in one forward pass."""
    from torch.utils._python_dispatch import TorchDispatchMode

    seen = []

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.aten.convolution.default:
                seen.append((tuple(args[0].shape), tuple(args[1].shape)))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Mode():
        model(*inputs)
    return seen


@pytest.mark.parametrize("name", ["resnet18", "convnext_atto"])
def test_timm_models_are_captured_as_a_dispatch_mode_sees_them(name):
    timm = pytest.importorskip("timm")
    spec = ModelSpec.create(f"timm:{name}", batch=2, input_shape=(3, 64, 64), train=False)
    cap = capture_model(spec, "cpu")
    torch.manual_seed(0)
    seen = _seen(timm.create_model(name, pretrained=False).eval(), [torch.randn(2, 3, 64, 64)])
    assert cap.conv_calls == len(seen) > 0
    assert {(tuple(u.problem.input_shape), tuple(u.problem.weight_shape))
            for u in cap.problems} == set(seen)
    assert sum(u.calls["fwd"] for u in cap.problems) == len(seen)
    assert zoo.timm_input(f"timm:{name}") == (3, 224, 224)  # its pretrained config's


def test_timm_name_errors():
    pytest.importorskip("timm")
    with pytest.raises(UserError, match="unknown timm model 'convnext_ato'; close names: "
                                        "convnext_atto"):
        zoo.timm_input("timm:convnext_ato")


def test_a_missing_timm_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # import timm raises ImportError
    with pytest.raises(MissingDependencyError, match="pip install timm"):
        zoo.timm_names()


def test_a_factory_with_arguments_and_a_dict_input_are_captured(nets):
    spec = ModelSpec.create("sourcenets:two", batch=2, input_shape=(3, 16, 16),
                            model_args={"width": 8}, inputs="sourcenets:inputs")
    cap = capture_model(spec, "cpu")
    shapes = sorted((tuple(u.problem.input_shape), tuple(u.problem.weight_shape))
                    for u in cap.problems)
    assert shapes == [((2, 1, 16, 16), (8, 1, 1, 1)), ((2, 3, 16, 16), (8, 3, 3, 3))]
    assert all(u.calls == {"fwd": 1, "bwd-filter": 1} for u in cap.problems)
    assert [u.layers for u in cap.problems] == [["image"], ["mask"]]
    assert "sourcenets:two(width=8), inputs from sourcenets:inputs" in cap.model.describe()
    again = ModelSpec.from_dict(spec.to_dict())
    assert again == spec
    plain = ModelSpec.create("resnet50")  # a spec without them saves as before
    assert "model_args" not in plain.to_dict() and "inputs" not in plain.to_dict()


@pytest.mark.parametrize("args,match", [
    (["--model-args", "{width: 8}"], "--model-args '{width: 8}': not JSON"),
    (["--model-args", "[8]"], "--model-args '[8]': valid: a JSON object"),
    (["--model", "sourcenets:boom"], "--model 'sourcenets:boom' raised RuntimeError: no such"),
    (["--inputs", "sourcenets:nothing"], "--inputs 'sourcenets:nothing': sourcenets has no"),
    (["--inputs", "noinputs"], "--inputs \"noinputs\": valid: pkg.module:function"),
])
def test_bad_sources_are_one_line_exit_2(nets, args, match):
    base = ["model"] + ([] if "--model" in args else ["--model", "sourcenets:two"])
    r = run_cli(*base, *args, "--input", "3x8x8", "--batch", "2", "--capture-only", env=nets)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and match in lines[-1], r.stderr
    assert "Traceback" not in r.stderr


def test_the_cli_captures_a_factory_with_arguments_and_its_own_inputs(nets):
    r = run_cli("model", "--model", "sourcenets:two", "--model-args", '{"width": 8}',
                "--inputs", "sourcenets:inputs", "--input", "3x16x16", "--batch", "2",
                "--capture-only", env=nets)
    assert r.returncode == 0, r.stderr
    assert "2x3x16x16 * 8x3x3x3 p1x1" in r.stdout and "2x1x16x16 * 8x1x1x1" in r.stdout
