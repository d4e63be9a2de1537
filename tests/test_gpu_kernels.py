"""On the GPU: the kernels a captured CUDA graph names are the profiler's, for legacy
rows, engine configs (timed in full and cut in round 1) and PyTorch's own calls
(Note [kernels from a graph] in csrc/graph_kernels.cpp)."""
import pytest

from cudnn_explorer.core.options import ExploreOptions, TimingSpec
from cudnn_explorer.core.problem import DIRECTIONS, ConvProblem

pytestmark = pytest.mark.gpu

PROBLEMS = {
    "fp32": dict(shape="8,16,32,32", out_channels=32),
    "fp16-nhwc": dict(shape="8,32,28,28", out_channels=64, dtype="float16", layout="nhwc"),
    "depthwise-bf16": dict(shape="8,32,28,28", out_channels=32, groups=32, dtype="bfloat16",
                           layout="nhwc"),
    "3d": dict(shape="2,8,6,12,12", out_channels=16),
}
BRIEF = TimingSpec(budget_ms=1.0, warmup_ms=1.0)


@pytest.mark.parametrize("name", sorted(PROBLEMS))
def test_graph_names_are_the_profilers(name):
    import torch

    from cudnn_explorer.core.knobs import OPERATION_OF, parse_tags
    from cudnn_explorer.measure import kernels, native
    from cudnn_explorer.measure.legacy import LegacyLab, unique_rows
    from cudnn_explorer.measure.problem_child import torch_call
    from cudnn_explorer.measure.tensors import make_tensors

    p = ConvProblem.create(**PROBLEMS[name])
    compared = {"legacy": 0, "engine": 0, "cut": 0, "pytorch": 0}
    unnamed = []
    for d in DIRECTIONS:
        lab = LegacyLab(p, d, ExploreOptions(check=False))
        for r in unique_rows(lab.find(None).find):
            if r.status_code != 0:
                continue
            lab.measure(r.algo, r.math_type, BRIEF, check=False)
            graph = lab.kernels(r.algo, r.math_type)
            prof = kernels._from_profiler(lambda: native.run_algorithm(
                d, lab.native, r.algo, r.math_type), 1)
            assert graph == prof, (d, r.algo_name, r.math_type)
            compared["legacy"] += 1
        search = native.engine_search(d, lab.native)
        configs = [(t.engine, [list(k) for k in t.knobs]) for t in parse_tags(
            f"{OPERATION_OF[d]}_{n}" for n in search.heuristics("A")[:6])]
        # knob 3 (USE_TEX) = 1: plans that a thread-local capture refuses (timed eagerly)
        tex = [e for e in range(search.engine_count())
               if any(k.type == 3 for k in search.engine_info(e).knobs)]
        configs += [(e, [[3, 1]]) for e in tex[:3]]
        for engine, knobs in configs:
            for cutoff in (0.0, 1e-6):  # timed in full; cut (after one launch or two)
                b = search.build(engine, knobs)
                if b.status != "built":
                    continue
                res = search.measure(b, True, native.timing_options(BRIEF, cutoff, True))
                if res.status != "OK":
                    continue
                if cutoff:
                    assert res.timing.method == "cut" and len(res.timing.per_launch_ms) == 1
                elif res.timing.method == "eager":  # not capturable for replays
                    compared["eager"] = compared.get("eager", 0) + 1
                else:
                    assert res.timing.method == "graph", (d, engine, knobs)
                prof = kernels._from_profiler(
                    lambda i=res.plan_index: search.execute(i), 1)
                if not res.timing.kernels_read:  # the caller asks the profiler then
                    unnamed.append((d, engine, knobs, res.timing.method))
                    continue
                assert kernels.distinct(res.timing.kernels) == prof, (d, engine, knobs, cutoff)
                compared["cut" if cutoff else "engine"] += 1
        lab.close()
        t = make_tensors(p, d, 0, 0, poison=False)
        fn = torch_call(p, d, t)
        fn()
        torch.cuda.synchronize()
        graph = kernels._from_graph(fn)
        assert graph is not None, d
        assert kernels.distinct(graph) == kernels._from_profiler(fn, 1), d
        assert kernels.kernel_names(fn) == kernels.distinct(graph)
        compared["pytorch"] += 1
    print(name, compared, "not named by a graph:", unnamed)
    assert all(compared.values()), compared
    # a graph names every kernel the timing ran, a config timed eagerly included
    assert not unnamed, unnamed
