"""The pure problem core: parsing, validation, output-size math, math types."""
import itertools

import pytest

from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.problem import ConvProblem, conv_output_size, parse_dtype, parse_int_list


def test_parse_int_list():
    assert parse_int_list("3", "--k") == (3,)
    assert parse_int_list("3,5", "--k") == (3, 5)
    assert parse_int_list("3x5", "--k") == (3, 5)
    assert parse_int_list(" 1 , 2 ,3", "--k") == (1, 2, 3)
    for bad in ("", "a", "3,", ",3", "3,,3", "1.5"):
        with pytest.raises(UserError, match="--k"):
            parse_int_list(bad, "--k")


def test_parse_dtype_aliases_and_error():
    assert parse_dtype("fp16") == "float16"
    assert parse_dtype("torch.bfloat16") == "bfloat16"
    assert parse_dtype("double") == "float64"
    with pytest.raises(UserError, match="float32, float16, bfloat16, float64"):
        parse_dtype("int8")


def test_defaults_2d():
    p = ConvProblem.create("32,3,224,224")
    assert p.kernel == (3, 3) and p.padding == (1, 1) and p.stride == (1, 1)
    assert p.weight_shape == (64, 3, 3, 3)
    assert p.output_shape == (32, 64, 224, 224)
    assert p.tf32 is True and p.math_type == "DEFAULT_MATH"
    assert "TF32 allowed" in p.describe()


def test_padding_default_is_kernel_half_per_dim():
    p = ConvProblem.create("1,4,9,10,11", kernel="3,4,5")
    assert p.padding == (1, 2, 2)


@pytest.mark.parametrize("dtype,tf32,math", [
    ("float32", True, "DEFAULT_MATH"), ("float32", False, "FMA_MATH"),
    ("float16", None, "TENSOR_OP_MATH"), ("bfloat16", None, "DEFAULT_MATH"),
    ("float64", None, "DEFAULT_MATH")])
def test_math_type_follows_pytorch(dtype, tf32, math):
    p = ConvProblem.create("1,8,8,8", dtype=dtype, tf32=tf32)
    assert p.math_type == math
    assert math in p.math_label


def test_tf32_only_for_float32():
    with pytest.raises(UserError, match="^tf32: applies to float32 only, not float16"):
        ConvProblem.create("1,8,8,8", dtype="float16", tf32=False)


def test_output_size_matches_pytorch_on_meta_tensors():
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    for size, k, s, p, d in itertools.product([5, 8, 13], [1, 2, 3, 5], [1, 2, 3], [0, 1, 2],
                                              [1, 2]):
        if conv_output_size(size, k, s, p, d) < 1:
            continue
        x = torch.empty(1, 2, size, size + 1, device="meta")
        w = torch.empty(4, 2, k, k, device="meta")
        y = F.conv2d(x, w, stride=s, padding=p, dilation=d)
        prob = ConvProblem.create((1, 2, size, size + 1), out_channels=4, kernel=k, stride=s,
                                  padding=p, dilation=d)
        assert prob.output_shape == tuple(y.shape)


def test_1d_and_3d_shapes_and_cudnn_view():
    p1 = ConvProblem.create("8,16,100", kernel=5, stride=2)
    assert p1.output_shape == (8, 64, 50)
    xs, ws, ys, pad, st, dil = p1.cudnn_params()
    assert xs == (8, 16, 1, 100) and ws == (64, 16, 1, 5) and ys == (8, 64, 1, 50)
    assert pad == (0, 2) and st == (1, 2) and dil == (1, 1)
    assert "N,C,1,L" in p1.describe()
    p3 = ConvProblem.create("2,8,4,16,16", kernel="1,3,3", groups=4, out_channels=8,
                            layout="nhwc", dtype="fp16")
    assert p3.weight_shape == (8, 2, 1, 3, 3)
    assert p3.output_shape == (2, 8, 4, 16, 16)
    assert "NDHWC" in p3.describe()


def test_depthwise():
    p = ConvProblem.create("4,32,16,16", groups=32, out_channels=32)
    assert p.is_depthwise and p.weight_shape == (32, 1, 3, 3)
    assert "depthwise" in p.describe()


@pytest.mark.parametrize("kwargs,match", [
    (dict(shape="32,3,abc"), "'abc' is not an integer"),
    (dict(shape="32,3"), "2 values; expected N,C,L"),
    (dict(shape="1,2,3,4,5,6"), "6 values"),
    (dict(shape="0,3,8,8"), "N must be >= 1, got 0"),
    (dict(shape="1,3,-8,8"), "H must be >= 1, got -8"),
    (dict(shape="1,3,4,4", kernel=9, padding=0), r"--kernel 9 in H: extent 9 .* padded input 4"),
    (dict(shape="1,3,8,8", kernel=3, dilation=5, padding=0),
     "--kernel 3 with --dilation 5 in H: extent 11"),
    (dict(shape="1,3,8,8", out_channels="64,64"), "--out-channels '64,64': expected one integer"),
    (dict(shape=(1, 3, 8.0, 8)), "--shape .*expected integers"),
    (dict(shape=(1, 3, True, 8)), "--shape .*expected integers"),
    (dict(shape="1,10000000000,1,1"), "C 10000000000 is larger than cuDNN's limit"),
    (dict(shape="100000,3000,224,224"), "the input .* elements; cuDNN"),
    (dict(shape="1,8,8,8", kernel=1, out_channels=2**31), "--out-channels 2147483648: larger"),
    (dict(shape="1,1000000000,1,1", kernel=1, out_channels=1000000000, groups=7),
     r"valid: 1, 2, 4, .* \(100 in all\)"),
    (dict(shape="1,3,8,8", tf32="yes"), "--tf32 'yes'"),
    (dict(shape="1,3,8,8", groups=2), "--groups 2: must divide input channels C=3 .* valid: 1"),
    (dict(shape="1,6,8,8", groups=4, out_channels=12), "valid: 1, 2, 3, 6"),
    (dict(shape="1,3,8,8", dtype="float8"), "--dtype 'float8'"),
    (dict(shape="1,3,8,8", layout="nwhc"), "--layout 'nwhc': valid: nchw, nhwc"),
    (dict(shape="1,3,8", layout="nhwc"), "2-D or 3-D"),
    (dict(shape="1,3,8,8", kernel="3,3,3"), "3 values for a 2-D problem"),
    (dict(shape="1,3,8,8", stride=0), "--stride 0: must be >= 1"),
    (dict(shape="1,3,8,8", padding=-1), "--padding -1: must be >= 0"),
    (dict(shape="1,3,8,8", out_channels=0), "--out-channels 0"),
    (dict(shape="1,3,8,8", groups=0), "--groups 0"),
])
def test_validation_messages(kwargs, match):
    shape = kwargs.pop("shape")
    with pytest.raises(UserError, match=match):
        ConvProblem.create(shape, **kwargs, source="cli")  # named as the command line does


@pytest.mark.parametrize("kwargs,match", [
    (dict(dtype="float17"), "^dtype 'float17': unknown dtype; valid: float32"),
    (dict(layout="nwhc"), "^layout 'nwhc': valid: nchw, nhwc"),
    (dict(out_channels=0), "^out_channels 0: must be >= 1"),
    (dict(groups=2), "^groups 2: must divide input channels C=3 and out_channels 64"),
    (dict(kernel=9, padding=0, dilation=2), "^kernel 9 with dilation 2 in H"),
    (dict(tf32="yes"), "^tf32 'yes'"),
    (dict(shape=(0, 3, 8, 8)), "^shape: N must be >= 1"),
    (dict(stride="a"), "^stride 'a'"),
])
def test_the_api_names_its_parameters_not_the_flags(kwargs, match):
    kwargs = {"shape": (1, 3, 8, 8), **kwargs}
    with pytest.raises(UserError, match=match) as e:
        ConvProblem.create(**kwargs)
    assert "--" not in str(e.value)


def test_dict_round_trip():
    p = ConvProblem.create("2,8,4,16,16", kernel="1,3,3", groups=4, out_channels=8,
                           layout="nhwc", dtype="bf16")
    d = p.to_dict()
    assert d["output_shape"] == list(p.output_shape) and d["math_type"] == "DEFAULT_MATH"
    assert ConvProblem.from_dict(d) == p


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("x,c_out,kernel,stride,padding,dilation,groups,output_padding", [
    ((2, 4, 9), 6, (3,), (2,), (1,), (1,), 1, (1,)),
    ((1, 6, 7, 10), 9, (3, 2), (2, 3), (1, 0), (2, 1), 3, (1, 2)),
    ((1, 4, 5, 6, 7), 4, (3, 3, 1), (1,), (1,), (1,), 1, (0,)),
])
def test_output_shape_is_pytorchs(x, c_out, kernel, stride, padding, dilation, groups,
                                  output_padding, transposed):
    """core.problem.output_shape (the pinned op's fake shapes, the tracer's transposed
    problems) against PyTorch's own convolution on the CPU."""
    import torch

    from cudnn_explorer.core.problem import output_shape

    if transposed:  # weight (C_in, C_out / groups, *kernel)
        w = (x[1], c_out // groups, *kernel)
    else:  # weight (C_out, C_in / groups, *kernel)
        w, output_padding = (c_out, x[1] // groups, *kernel), (0,)
    got = output_shape(x, w, stride, padding, dilation, groups, transposed, output_padding)
    n = len(x) - 2
    out = torch.ops.aten.convolution(
        torch.zeros(x), torch.zeros(w), None, list(stride) * (n // len(stride)),
        list(padding) * (n // len(padding)), list(dilation) * (n // len(dilation)),
        transposed, list(output_padding) * (n // len(output_padding)), groups)
    assert got == list(out.shape)


@pytest.mark.parametrize("call,match", [
    (lambda: ConvProblem.create(range(10**12)), "shape range.*: more than 15 values"),
    (lambda: ConvProblem.create("1,3,8,8", kernel=iter(range(1, 10**12))), "kernel .*more than 15"),
    (lambda: ConvProblem.create([1, 3, 10**5000, 8]), "shape: <an integer of 16610 bits>: "
                                                      "beyond any size"),
    (lambda: ConvProblem.create("1,3,8,8", stride=-10**5000), "stride: <an integer of"),
    (lambda: ConvProblem.create("1," * 100000 + "1"), r"^shape 1,1,[1,]*\.\.\.: 100001 values"),
])
def test_absurd_api_values_are_refused_at_once_in_a_short_line(call, match):
    """A huge iterable is not read whole, an integer too long to print is said by its
    size, and a long value is cut: a short UserError, never a hang or a raw ValueError."""
    with pytest.raises(UserError, match=match) as e:
        call()
    assert len(str(e.value)) < 200


def test_shown_and_told_never_raise():
    import numpy as np

    from cudnn_explorer.core.problem import told
    from cudnn_explorer.core.schema import shown

    assert shown(np.int64(8)) == "np.int64(8)" and shown(10**5000) == "<an integer of 16610 bits>"
    assert shown([10**5000]) == "<a list>"
    assert told(10**5000) == "<an integer of 16610 bits>" and told("x" * 100).endswith("...")
