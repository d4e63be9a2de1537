"""Plans built ahead on threads of their own, and kept between processes, on the GPU
(Note [plans built ahead] and Note [kept plans] in csrc/pinned_plans.cpp): the plans
and numbers are those of plans built on first call, every call runs pinned (the op's
own counts), a kept plan restores instead of building, and a corrupt or stale one is
built instead, counted. Each prints one line, "ahead check: ...", with what it saw."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from conftest import requires_cuda
from pinning_helpers import heuristic_plans

pytestmark = requires_cuda

SHAPES = [(8, 16, 20, 20, 32, 3, 1), (8, 32, 20, 20, 32, 1, 1), (8, 32, 20, 20, 48, 3, 2),
          (8, 48, 10, 10, 48, 3, 1)]  # N, C, H, W, K, kernel, stride


def _model():
    import torch

    torch.manual_seed(0)
    layers = [torch.nn.Conv2d(c, k, r, stride=s, padding=r // 2, bias=False)
              for _, c, _, _, k, r, s in SHAPES]
    return torch.nn.ModuleList(layers).cuda().to(memory_format=torch.channels_last)


def _inputs():
    import torch

    g = torch.Generator(device="cuda").manual_seed(1)
    return [torch.randn(n, c, h, w, generator=g, device="cuda").to(
        memory_format=torch.channels_last).half().requires_grad_()
            for n, c, h, w, *_ in SHAPES]


def _step(model, xs):
    """Each layer on its own input under AMP fp16: (outputs, input grads, weight grads)."""
    import torch

    outs = []
    with torch.autocast("cuda", dtype=torch.float16):
        for layer, x in zip(model, xs):
            outs.append(layer(x))
    grads = torch.autograd.grad(sum(o.float().square().mean() for o in outs),
                                list(xs) + list(model.parameters()))
    torch.cuda.synchronize()
    return [o.detach() for o in outs], grads


def _plans():
    from cudnn_explorer.model.tracer import problem_of

    import torch

    problems = []
    for (n, c, h, w, k, r, s) in SHAPES:
        x = torch.empty(n, c, h, w, device="cuda", dtype=torch.half).to(
            memory_format=torch.channels_last)
        wt = torch.empty(k, c, r, r, device="cuda", dtype=torch.half).to(
            memory_format=torch.channels_last)
        problems.append(problem_of(x, wt, [s, s], [r // 2] * 2, [1, 1], 1, False, False,
                                   [0, 0]))
    return problems


def _file(tmp_path, rank=0, name="plans.json"):
    """A plan file of this GPU's environment (pin() refuses another's), with heuristic
    configs at ``rank`` for every problem-direction."""
    import dataclasses

    import torch

    from cudnn_explorer.core.plans import PlanEnvironment
    from cudnn_explorer.measure.pipeline import environment

    plans = dataclasses.replace(
        heuristic_plans(_plans(), rank=rank),
        environment=PlanEnvironment.of(environment(torch.cuda.current_device())))
    assert len(plans.entries) == 3 * len(SHAPES)
    path = str(tmp_path / name)
    with open(path, "w") as f:
        f.write(plans.to_json())
    return path, plans


def _pinned_step(path, **kw):
    """(outputs, grads, counts, plans made) of one step of a fresh model pinned to ``path``."""
    import cudnn_explorer as ce
    from cudnn_explorer.pinning import op

    model = _model()
    ce.pin(model, path, **kw)
    if kw.get("ahead", True):
        ce.wait_for_plans()
    made = op.plans_made()
    op.reset_counts()
    outs, grads = _step(model, _inputs())
    return outs, grads, op.pin_counts(), made


def _aten_step():
    import torch

    torch.backends.cudnn.benchmark = False
    return _step(_model(), _inputs())


def _rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)
            ).item()


def test_plans_built_ahead_in_parallel_run_the_plans_built_on_first_call(tmp_path):
    """Four builder threads build the plans of 12 problem-directions; the step then
    runs exactly the plans a serial first-call build runs, every call pinned, with
    forward outputs equal bit for bit and gradients equal."""
    path, plans = _file(tmp_path)
    serial = _pinned_step(path, ahead=False, keep=False)
    parallel = _pinned_step(path, ahead=4, keep=False)
    ref_outs, ref_grads = _aten_step()
    for outs, grads, counts, made in (serial, parallel):
        assert counts.fallback_calls == 0 and counts.pinned_calls == 12, counts
    assert serial[2].plans_ran == parallel[2].plans_ran
    assert len(parallel[3]) == 12 and all(m.builds == 1 and m.restored == 0
                                          for m in parallel[3]), parallel[3]
    assert serial[3] == []  # none made before the step: built on first call
    for a, b in zip(serial[0], parallel[0]):
        assert a.equal(b)
    grad_err = max(_rel(a, b) for a, b in zip(serial[1], parallel[1]))
    assert grad_err <= 1e-3, grad_err  # split-K reductions may order sums differently
    aten_err = max(_rel(a, b) for a, b in zip(serial[0] + list(serial[1]),
                                              ref_outs + list(ref_grads)))
    assert aten_err <= 2e-2, aten_err
    print(f"\nahead check: parallel builds: {len(parallel[3])} plans on 4 threads in "
          f"{sum(m.build_ms for m in parallel[3]):.0f} ms of thread time; same plans as serial; "
          f"grads rel {grad_err:.1e}; vs ATen {aten_err:.1e}; pinned "
          f"{parallel[2].pinned_calls}, fallback {parallel[2].fallback_calls}")


def test_kept_plans_round_trip_and_restore_instead_of_building(tmp_path):
    """A pin that builds writes the kept plans beside the file; the next pin restores
    every plan from them (no build), runs every call pinned and computes what the built
    plans computed."""
    path, plans = _file(tmp_path)
    built = _pinned_step(path)
    assert os.path.exists(path + ".kept")
    restored = _pinned_step(path)
    made = restored[3]
    assert len(made) == 12 and all(m.restored == 1 and m.builds == 0 and not m.kept_error
                                   for m in made), made
    assert restored[2].fallback_calls == 0 and restored[2].pinned_calls == 12
    assert restored[2].plans_ran == built[2].plans_ran
    for a, b in zip(built[0], restored[0]):
        assert a.equal(b)
    err = max(_rel(a, b) for a, b in zip(built[1], restored[1]))
    assert err <= 1e-3, err
    ref_outs, ref_grads = _aten_step()  # restored plans against PyTorch's own convolutions
    aten_err = max(_rel(a, b) for a, b in zip(restored[0] + list(restored[1]),
                                              ref_outs + list(ref_grads)))
    assert aten_err <= 2e-2, aten_err
    print(f"\nahead check: kept plans: built {sum(m.build_ms for m in built[3]):.0f} ms, "
          f"restored {sum(m.build_ms for m in made):.1f} ms (thread time, 12 plans); "
          f"outputs bit-equal, grads rel {err:.1e}; vs ATen {aten_err:.1e}")


def test_a_corrupt_or_stale_kept_plan_is_built_instead_and_counted(tmp_path):
    """A kept form that fails its checksum, one for another engine config of the same
    problem (the plan file changed), and a file of another GPU: each plan concerned is
    built from its engine config, counted, and the step runs every call pinned."""
    import base64
    import gzip
    import warnings

    path, plans = _file(tmp_path)
    _pinned_step(path)  # writes the kept plans
    kept_path = path + ".kept"
    doc = json.loads(gzip.decompress(open(kept_path, "rb").read()))
    form = bytearray(base64.b64decode(doc["plans"][0]["form"]))
    form[len(form) // 2] ^= 0x55
    doc["plans"][0]["form"] = base64.b64encode(bytes(form)).decode()
    open(kept_path, "wb").write(gzip.compress(json.dumps(doc).encode()))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _, _, counts, made = _pinned_step(path)
    assert any("1 plan(s) failed their checksum" in str(w.message) for w in seen)
    assert sum(m.builds for m in made) == 1 and sum(m.restored for m in made) == 11
    assert counts.fallback_calls == 0

    # the plan file changed: the same problems with other engine configs
    other, other_plans = _file(tmp_path, rank=1, name="other.json")
    before = {repr(e.key): e.tag for e in plans.entries}
    changed = [e.tag for e in other_plans.entries if before[repr(e.key)] != e.tag]  # per key
    assert changed
    _, _, counts, made = _pinned_step(other, keep=kept_path)
    stale = [m for m in made if m.kept_error]
    assert sorted(m.tag for m in stale) == sorted(changed), made
    assert all(m.builds == 1 and m.restored == 0 and "not the file's" in m.kept_error
               for m in stale), stale
    assert all(m.restored == 1 and m.builds == 0 for m in made if not m.kept_error), made
    assert counts.fallback_calls == 0 and counts.pinned_calls == 12

    doc = json.loads(gzip.decompress(open(kept_path, "rb").read()))
    doc["environment"]["sm_count"] += 1
    open(kept_path, "wb").write(gzip.compress(json.dumps(doc).encode()))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _, _, counts, made = _pinned_step(path)
    assert any("another environment (sm_count" in str(w.message) for w in seen)
    assert all(m.builds == 1 and m.restored == 0 for m in made) and counts.fallback_calls == 0
    print(f"\nahead check: stale kept plans: checksum 1 built + 11 restored; changed file "
          f"{len(stale)} built ({stale[0].kept_error[:60]}...); other GPU 12 built")


def test_kept_plans_restore_in_a_fresh_process(tmp_path):
    """Two fresh processes: the first builds and keeps, the second restores every plan
    and computes what the first computed, every call pinned."""
    path, _ = _file(tmp_path)
    script = textwrap.dedent(f"""
        import json, sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_gpu_pinning_ahead import _pinned_step
        outs, grads, counts, made = _pinned_step({path!r})
        torch.save([o.cpu() for o in outs], sys.argv[1])
        print(json.dumps({{"pinned": counts.pinned_calls, "fallback": counts.fallback_calls,
                           "builds": sum(m.builds for m in made),
                           "restored": sum(m.restored for m in made),
                           "ms": sum(m.build_ms for m in made)}}))
    """)
    runs = []
    for i in range(2):
        out = subprocess.run([sys.executable, "-c", script, str(tmp_path / f"o{i}.pt")],
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr[-2000:]
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["builds"] == 12 and runs[0]["restored"] == 0
    assert runs[1]["builds"] == 0 and runs[1]["restored"] == 12
    assert all(r["pinned"] == 12 and r["fallback"] == 0 for r in runs)
    import torch

    a, b = (torch.load(tmp_path / f"o{i}.pt") for i in range(2))
    assert all(x.equal(y) for x, y in zip(a, b))
    print(f"\nahead check: fresh processes: built {runs[0]['ms']:.0f} ms, restored "
          f"{runs[1]['ms']:.1f} ms (thread time, 12 plans); outputs bit-equal")


def test_a_capture_right_after_pin_takes_the_plans_built_ahead(tmp_path):
    """Without a step before it, a CUDA-graph capture takes the plans built ahead (a
    capture cannot build: Note [no builds in a capture]); replayed, it computes the
    eager step's outputs."""
    import torch

    import cudnn_explorer as ce
    from cudnn_explorer.pinning import op

    path, _ = _file(tmp_path)
    model = _model()
    ce.pin(model, path, keep=False)
    ce.wait_for_plans()
    xs = [x.detach() for x in _inputs()]
    op.reset_counts()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad(), \
            torch.autocast("cuda", torch.float16, cache_enabled=False):
        with torch.cuda.graph(graph, stream=stream):
            outs = [layer(x) for layer, x in zip(model, xs)]
    torch.cuda.current_stream().wait_stream(stream)
    counts = op.pin_counts()
    assert counts.fallback_calls == 0 and counts.pinned_calls == 4, counts
    graph.replay()
    with torch.no_grad(), torch.autocast("cuda", torch.float16):
        eager = [layer(x) for layer, x in zip(model, xs)]
    torch.cuda.synchronize()
    assert all(a.equal(b) for a, b in zip(outs, eager))
    print("\nahead check: capture right after pin: 4 pinned calls captured, 0 fallbacks")
