"""Layer names a recording gives the convolutions it records (Note [layer names without
the model] in pinning/layer_names.py): from torch's global registration hooks, with no
model handed to us; keys as the op computes them, once per layer and call shape."""
import pytest

from conftest import requires_ext

torch = pytest.importorskip("torch")
nn = torch.nn

pytestmark = requires_ext


class Down(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.conv(x)


def _model():
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Sequential(Down(), Down()),
                         nn.ConvTranspose2d(8, 4, 2, stride=2))


@pytest.fixture
def names():
    from cudnn_explorer.pinning import functional
    from cudnn_explorer.pinning.layer_names import LayerNames

    n = LayerNames()
    n.install()
    functional.OBSERVER[0] = n.observe
    functional.TRACE_OBSERVER[0] = n.observe_traced
    yield n
    functional.OBSERVER[0] = functional.TRACE_OBSERVER[0] = None
    n.remove()


def _run(model, x):
    from cudnn_explorer.pinning.functional import pinned_functions

    with pinned_functions():
        return model(x)


def test_each_layer_is_named_as_named_modules_names_it_under_its_keys(names):
    from cudnn_explorer.pinning import op

    model = _model()
    x = torch.randn(2, 3, 10, 10)
    _run(model, x)
    by_key = names.by_key()
    conv0 = model[0]
    keys0 = op.conv_keys(x, conv0.weight, [1, 1], [0, 0], [1, 1])
    assert all(by_key[tuple(k)] == ["0"] for k in keys0)
    h = torch.randn(2, 8, 8, 8)
    keys_down = op.conv_keys(h, model[2][0].conv.weight, [1, 1], [1, 1], [1, 1])
    # both Down blocks share a problem: the key names both layers
    assert by_key[tuple(keys_down[0])] == ["2.0.conv", "2.1.conv"]
    keys_t = op.conv_keys(h, model[3].weight, [2, 2], [0, 0], [1, 1], True, [0, 0])
    assert by_key[tuple(keys_t[0])] == ["3"]
    assert {n for v in by_key.values() for n in v} == {"0", "2.0.conv", "2.1.conv", "3"}


def test_keys_are_computed_once_per_layer_and_call_shape(names, monkeypatch):
    from cudnn_explorer.pinning import op

    model = _model()
    real, calls = op.conv_keys, []
    monkeypatch.setattr(op, "conv_keys", lambda *a: calls.append(1) or real(*a))
    for _ in range(3):
        _run(model, torch.randn(2, 3, 10, 10))
    assert len(calls) == 4
    _run(model, torch.randn(2, 3, 12, 12))  # a new size: each layer's keys once more
    assert len(calls) == 8


def test_a_dead_layers_cache_entry_goes_with_it_and_a_new_layer_is_observed_afresh(names):
    import gc

    model = _model()
    _run(model, torch.randn(2, 3, 10, 10))
    assert len(names._seen) == 4  # one entry per convolution's weight
    del model
    gc.collect()
    assert names._seen == {}  # nothing of a dead layer is kept
    again = _model()  # may reuse the dead weights' ids: its calls are still noted
    _run(again, torch.randn(2, 3, 10, 10))
    assert len(names._seen) == 4 and len(names.by_key()) > 0


def test_unregistered_weights_and_models_built_before_name_nothing():
    import torch.nn.functional as F

    from cudnn_explorer.pinning import functional
    from cudnn_explorer.pinning.layer_names import LayerNames

    before = nn.Conv2d(3, 4, 3)
    n = LayerNames()
    n.install()
    functional.OBSERVER[0] = n.observe
    try:
        x = torch.randn(1, 3, 8, 8)
        _run(before, x)
        _run(lambda t: F.conv2d(t, torch.randn(4, 3, 3, 3)), x)
        assert n.by_key() == {} and n.name_of(torch.zeros(1)) is None
        solo = nn.Conv2d(3, 4, 3)  # a layer that is its own model: its class names it
        _run(solo, x)
        assert {v[0] for v in n.by_key().values()} == {"Conv2d"}
    finally:
        functional.OBSERVER[0] = None
        n.remove()


def test_the_record_part_carries_the_layers_of_its_keys():
    from cudnn_explorer.core.pin_report import PinCounts, PinnedDirection
    from cudnn_explorer.pinning.zero_code import part_record

    counts = PinCounts(directions=[
        PinnedDirection(key=[1, 2, 3], description="a", covered=False, fallback_calls=4),
        PinnedDirection(key=[4, 5], description="b", covered=False, fallback_calls=1)])
    part = part_record(counts, 3, {(1, 2, 3): ["enc.0", "enc.1"]})
    assert [c.layers for c in part.convs] == [["enc.0", "enc.1"], []]


def test_a_wrapped_model_keeps_its_own_names(names):
    model = _model()
    torch.compile(model)  # wraps it (as _orig_mod) without compiling anything yet
    nn.DataParallel(model)  # as "module"
    _run(model, torch.randn(2, 3, 10, 10))  # an eager call, as a penalty step makes
    assert {n for v in names.by_key().values() for n in v} == {"0", "2.0.conv", "2.1.conv",
                                                              "3"}


def test_fsdp_and_checkpoint_wrappers_of_a_part_keep_the_parts_own_name(names):
    class FullyShardedDataParallel(nn.Module):  # named as torch's, registering as it does
        def __init__(self, inner):
            super().__init__()
            self._fsdp_wrapped_module = inner

        def forward(self, x):
            return self._fsdp_wrapped_module(x)

    class CheckpointWrapper(FullyShardedDataParallel):
        def __init__(self, inner):
            nn.Module.__init__(self)
            self._checkpoint_wrapped_module = inner

        def forward(self, x):
            return self._checkpoint_wrapped_module(x)

    down = Down()
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), CheckpointWrapper(down))
    outer = FullyShardedDataParallel(model)
    _run(outer, torch.randn(2, 3, 10, 10))
    assert {n for v in names.by_key().values() for n in v} == {"0", "1.conv"}


def test_a_call_that_cannot_be_named_never_raises(names, monkeypatch):
    from cudnn_explorer.pinning import op

    def broken(*a):
        raise RuntimeError("no keys")
    monkeypatch.setattr(op, "conv_keys", broken)
    model = _model()
    assert _run(model, torch.randn(2, 3, 10, 10)).shape == (2, 4, 16, 16)
    assert names.by_key() == {}
    names.observe(None, None, None, None, None, None, None, None)  # nothing a tensor: no raise


class Pyramid(nn.Module):
    """Two layers of one geometry at two resolutions (a feature pyramid's), and a layer
    whose forward casts its weight itself."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(3, 8, 3, padding=1)
        self.fine = nn.Conv2d(8, 8, 3, padding=1)
        self.coarse = nn.Conv2d(8, 8, 3, padding=1)
        self.cast = nn.Conv2d(8, 8, 1)

    def forward(self, x):
        import torch.nn.functional as F

        x = self.fine(self.stem(x))
        y = self.coarse(F.max_pool2d(x, 2))
        return x.sum() + y.sum() + F.conv2d(y.double(), self.cast.weight.double()).sum()


def _pyramid_keys(model, size):
    """The op's keys of each Pyramid layer's calls at input ``size``, by layer name."""
    from cudnn_explorer.pinning import op

    def keys(x, layer, padding):
        return op.conv_keys(x, layer.weight, [1, 1], [padding] * 2, [1, 1])
    fine, coarse = torch.randn(2, 8, size, size), torch.randn(2, 8, size // 2, size // 2)
    return {"stem": keys(torch.randn(2, 3, size, size), model.stem, 1),
            "fine": keys(fine, model.fine, 1), "coarse": keys(coarse, model.coarse, 1),
            "cast": op.conv_keys(coarse.double(), model.cast.weight.double(), [1, 1], [0, 0],
                                 [1, 1])}


def _compile_and_run(model, sizes, dynamic=None):
    """Graphs compiled and graph breaks while ``model`` runs compiled under routing
    (aot_eager: the graph holds the op) at each input size, forward and backward."""
    from cudnn_explorer.pinning import functional

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        with functional.process_routing():
            compiled = torch.compile(model, backend="aot_eager", dynamic=dynamic)
            for size in sizes:
                compiled(torch.randn(2, 3, size, size, requires_grad=True)).backward()
            return (torch._dynamo.utils.counters["stats"]["unique_graphs"],
                    sum(torch._dynamo.utils.counters["graph_break"].values()))
    finally:
        torch._dynamo.reset()


def test_compiled_calls_are_named_while_traced_each_layer_its_own_keys(names):
    """Note [names of traced calls]: a model compiled at fixed sizes names each traced
    call's own keys, as eager calls do: two layers of one geometry at two resolutions
    keep their own names (and share none); a weight cast in the traced code names
    nothing, as eagerly; no graph break."""
    model = Pyramid()
    assert _compile_and_run(model, [16], dynamic=False) == (1, 0)
    keys = _pyramid_keys(model, 16)
    by_key = names.by_key([k for ks in keys.values() for k in ks])
    for layer in ("stem", "fine", "coarse"):
        assert [by_key.get(tuple(k)) for k in keys[layer]] == [[layer]] * 3, layer
    assert all(tuple(k) not in by_key for k in keys["cast"])
    assert len(by_key) == 9


def test_a_dynamic_graph_names_the_keys_of_sizes_it_ran_without_tracing(names):
    """A graph with symbolic sizes names every recorded key its own matches where the
    symbolic sizes do not set it: sizes it never traced (40 here) too. A layer of other
    channels or geometry keeps its own; two of one geometry at sizes that are both
    symbolic can each have run any size, so each names the other's keys too."""
    model = Pyramid()
    assert _compile_and_run(model, [16, 24, 32]) == (2, 0)  # the second: a dynamic graph
    for size in (16, 24, 40):
        keys = _pyramid_keys(model, size)
        by_key = names.by_key([k for ks in keys.values() for k in ks])
        assert [by_key.get(tuple(k)) for k in keys["stem"]] == [["stem"]] * 3, size
        for layer in ("fine", "coarse"):
            assert [by_key.get(tuple(k)) for k in keys[layer]] == [["coarse", "fine"]] * 3
        assert all(tuple(k) not in by_key for k in keys["cast"])
    other = torch.randn(2, 5, 10, 10)  # channels no layer has: no name
    from cudnn_explorer.pinning import op

    others = [tuple(k) for k in op.conv_keys(other, torch.randn(8, 5, 3, 3), [1, 1], [0, 0],
                                              [1, 1])]
    assert not set(others) & set(names.by_key(others))


def test_a_traced_call_that_cannot_be_named_never_raises(names):
    """Whatever dynamo hands over, observe_traced returns (the trace goes on), and by_key
    takes keys of any length."""
    names.observe_traced(None, None, None, None, None, None, None, None)
    names.observe_traced((torch.randn(1, 3, 4, 4), None), (torch.randn(4, 3, 3, 3), None),
                         [1, 1], [0, 0], [1, 1], False, [0, 0], 1)  # not fakes: no name
    assert names.by_key() == {} and names._traced == {}
    names._traced[(1, None, 3)] = {"x"}
    assert names.by_key([[1], [1, 2, 3, 4], [1, 9, 3]]) == {(1, 9, 3): ["x"]}


def test_calls_are_named_under_the_new_tf32_api(names):
    """torch.backends.cudnn.conv.fp32_precision set alone makes the legacy TF32 getter
    raise; the observer reads the convolutions' own setting and still names the calls."""
    conv = getattr(torch.backends.cudnn, "conv", None)
    precision = getattr(conv, "fp32_precision", None)
    if precision is None:
        pytest.skip("this torch has no torch.backends.cudnn.conv.fp32_precision")
    model, x = _model(), torch.randn(2, 3, 10, 10)
    torch.backends.cudnn.conv.fp32_precision = "tf32"
    try:
        _run(model, x)
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        _run(model, x)  # the same call shapes, another TF32 setting: observed again
    finally:
        torch.backends.cudnn.conv.fp32_precision = precision
    by_key = names.by_key()
    assert {n for v in by_key.values() for n in v} == {"0", "2.0.conv", "2.1.conv", "3"}
    assert {k[3] for k in by_key} == {0, 1}  # keys with TF32 and without
