"""PyTorch's own run of a whole model, on the CPU: the child's probe (every convolution
call timed, the backward split per direction, the gradients unchanged), the records built
from a child's result and a real cudnn-frontend log from the H200, PyTorch's picks per
problem from them, the report, the sweep file (version 2, version 1 still loading), and a
child that fails or hangs."""
import dataclasses
import json
import os
import stat

import pytest
from cudnn_explorer.core.errors import UserError

torch = pytest.importorskip("torch")

from cudnn_explorer.core import logs  # noqa: E402
from cudnn_explorer.core.child_records import (ModelChildResult, ProblemChildResult,  # noqa: E402
                                               SizeResult)
from cudnn_explorer.core.capture import Capture, ModelSpec, UniqueConv  # noqa: E402
from cudnn_explorer.core.model_run import ModelRun  # noqa: E402
from cudnn_explorer.core.options import ExploreOptions  # noqa: E402
from cudnn_explorer.core.problem import ConvProblem  # noqa: E402
from cudnn_explorer.core.model_sweep import ModelSweep  # noqa: E402
from cudnn_explorer.measure.pytorch_picks import pick_of  # noqa: E402
from cudnn_explorer.model import mode_runner, run_modes  # noqa: E402
from cudnn_explorer.model.tracer import capture, iteration  # noqa: E402
from cudnn_explorer.model.mode_child import _NoGpu, _Probe, first_iteration  # noqa: E402
from cudnn_explorer.report.model import render_model_run, render_sweep  # noqa: E402
from fakes import ENV, FIX  # noqa: E402

GIB = 2**30


def tiny():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(8, 8, 3, padding=1),
                               torch.nn.Conv2d(8, 8, 3, padding=1))


def probed_iteration(net, spec, x):
    """The probe of one iteration of ``net()`` (a fresh model each call), after checking
    that the probed iteration's gradients are a plain iteration's."""
    plain = net()
    iteration(plain, [x], spec, "cpu")
    probed = net()
    probe = _Probe(_NoGpu(), None, True, set())
    first_iteration(torch, probed, [x], spec, "cpu", probe)
    for a, b in zip(plain.parameters(), probed.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6)
    return probe


def test_probe_times_every_call_splits_backward_and_keeps_gradients():
    spec = ModelSpec(name="tiny", input_shape=[3, 8, 8], batch=2)
    x = torch.randn(2, 3, 8, 8)
    calls = probed_iteration(tiny, spec, x).calls
    # 3 forward calls; backward: the first layer computes no input gradient (1 call), the
    # others both gradients, each split into one call per direction.
    assert [c["direction"] for c in calls] == [
        "fwd", "fwd", "fwd", "bwd-data", "bwd-filter", "bwd-data", "bwd-filter", "bwd-filter"]
    assert [c["layer"] for c in calls[:3]] == ["0", "2", "3"]
    # layers 2 and 3 run the same problem: only its first call in each direction searches
    assert [c["first"] for c in calls] == [True, True, False, True, True, False, False, True]
    cap = capture(tiny(), [x], spec, "cpu")
    assert {ConvProblem.from_dict(c["problem"]) for c in calls} == {
        u.problem for u in cap.problems}
    assert all(c["ms"] >= 0 and c["log_span"] == [0, 0] for c in calls)


def test_probe_names_a_transposed_convolutions_calls_by_the_problem_pytorch_runs():
    """Note [transposed]: the forward is its problem's backward-data, the input's gradient
    its forward; the split backward keeps the gradients."""
    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=2, padding=1),
                                   torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1,
                                                            output_padding=1))

    spec = ModelSpec(name="up", input_shape=[3, 8, 8], batch=2)
    x = torch.randn(2, 3, 8, 8)
    probe = probed_iteration(net, spec, x)
    assert [(c["direction"], c["layer"]) for c in probe.calls] == [
        ("fwd", "0"), ("bwd-data", "1 (transposed)"), ("fwd", ""), ("bwd-filter", ""),
        ("bwd-filter", "")]
    cap = capture(net(), [x], spec, "cpu")
    up = ConvProblem.from_dict(probe.calls[1]["problem"])
    assert up.input_shape == (2, 4, 8, 8) and up.output_shape == (2, 8, 4, 4)
    assert {ConvProblem.from_dict(c["problem"]) for c in probe.calls} == {
        u.problem for u in cap.problems}


def test_a_problem_both_passes_run_is_searched_once_per_pass():
    """A strided convolution and the transposed one that undoes it run one problem; the
    forward pass runs its forward and backward-data (the transposed forward), and so does
    the backward pass: PyTorch's plan caches are per thread, so each pass searches them."""
    from cudnn_explorer.core.advice import plans_needed

    def net():
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1),
                                   torch.nn.Conv2d(4, 8, 2, stride=2),
                                   torch.nn.ConvTranspose2d(8, 4, 2, stride=2))

    spec = ModelSpec(name="updown", input_shape=[3, 8, 8], batch=2)
    x = torch.randn(2, 3, 8, 8)
    probe = _Probe(_NoGpu(), None, True, set())
    first_iteration(torch, net(), [x], spec, "cpu", probe)
    shared = ConvProblem.from_dict(probe.calls[1]["problem"])
    assert [(c["direction"], c["first"]) for c in probe.calls
            if ConvProblem.from_dict(c["problem"]) == shared] == [
        ("fwd", True), ("bwd-data", True),                                 # forward pass
        ("fwd", True), ("bwd-filter", True), ("bwd-data", True), ("bwd-filter", False)]
    cap = capture(net(), [x], spec, "cpu")
    assert len(cap.problems) == 2
    u = next(u for u in cap.problems if u.problem == shared)
    assert u.layers == ["1", "2 (transposed)"]
    assert u.calls == {"fwd": 2, "bwd-data": 2, "bwd-filter": 2}
    assert u.transposed_calls == {"bwd-data": 1, "fwd": 1, "bwd-filter": 1}
    assert [u.passes(d) for d in u.directions] == [["forward", "backward"]] * 2 + [["backward"]]
    assert plans_needed(cap) == ((3, 4), (3, 4))
    assert Capture.from_json_dict(json.loads(cap.to_json())).problems == cap.problems
    # PyTorch's pick of a direction both passes searched is the first search's
    result = _typed({"settings": {}, "sizes": [{"input_shape": [3, 8, 8],
                                                "calls": probe.calls}]})
    per = run_modes._picks(result, {p.problem: i for i, p in enumerate(cap.problems)},
                           run_modes.searches_of(result, b""), run_modes.model_modes()[0])
    assert list(per[1]) == ["fwd", "bwd-data", "bwd-filter"]
    first = [c for c in probe.calls if ConvProblem.from_dict(c["problem"]) == shared]
    assert per[1]["fwd"].first_call_ms == first[0]["ms"]  # the forward pass's first call


def _fixture_json(name: str) -> dict:
    with open(os.path.join(FIX, name)) as f:
        return json.load(f)


def _typed(result: dict) -> ModelChildResult:
    """A model child's result as its parent reads it (the record on the wire)."""
    return ModelChildResult.read(result, "test result")


def _size(d: dict) -> SizeResult:
    return SizeResult.from_dict(d, "test size")


def _size_run(d: dict, index, log: bytes):
    """A size's SizeRun, its calls' searches parsed out of ``log`` first."""
    raw = _size(d)
    return run_modes._size_run(raw, index, run_modes._searches(raw, log))


def _fixture_child_result():
    """A model child's result for a one-layer model of the default problem, built from the
    real per-problem child's measurements and log (H200, benchmark mode)."""
    with open(os.path.join(FIX, "default_benchmark.result.json")) as f:
        per = json.load(f)
    with open(os.path.join(FIX, "default_benchmark.fe.log"), "rb") as f:
        log = f.read()
    problem = ConvProblem.create("32,3,224,224", kernel=3)
    base = 3 * GIB
    calls = []
    for d in per["directions"]:
        a0 = base
        calls.append({"problem": problem.to_dict(), "direction": d["direction"],
                      "layer": "conv1" if d["direction"] == "fwd" else "", "first": True,
                      "ms": d["first_call_ms"], "alloc_before": a0,
                      "peak_alloc": a0 + d["first_peak_alloc_bytes"],
                      "reserved_before": a0, "reserved_after": a0 + d["first_peak_alloc_bytes"],
                      "log_span": d["log_span"]})
    size = {"input_shape": [3, 224, 224], "first_ms": 1700.0, "before_alloc": base,
            "before_reserved": base, "first_peak_alloc": base + 1543904256,
            "first_peak_reserved": base + 1600000000, "other_peak_alloc": base + 10,
            "conv_calls": 3, "conv_ms": sum(c["ms"] for c in calls), "calls": calls,
            "steady_ms": [10.0, 10.2, 9.9, 10.1], "warmup": 5,
            "steady_peak_alloc": base + 400000000, "steady_peak_reserved": base + GIB}
    return problem, {"settings": per["settings"], "error": "", "sizes": [size]}, log


def test_child_result_becomes_records_and_picks():
    problem, result, log = _fixture_child_result()
    index = {problem: 0}
    found = run_modes.searches_of(_typed(result), log)
    size = run_modes._size_run(_size(result["sizes"][0]), index, found[0])
    searches = {s.direction: s for s in logs.parse_frontend_log(log.decode())}
    assert [c.plan for c in size.calls] == [searches[d].winner for d in
                                          ("fwd", "bwd-data", "bwd-filter")]
    assert all(c.plan and c.candidates >= c.timed > 0 for c in size.calls)
    fwd = size.calls[0]
    assert fwd.largest_candidate_bytes == searches["fwd"].largest_workspace().workspace_bytes
    # bwd-filter's first call went highest (1.44 GiB above 3 GiB): it set the peak
    assert size.peak_call.direction == "bwd-filter"
    assert size.peak_call.peak_above_bytes == 1543904256
    assert size.steady.median_ms == pytest.approx(10.05)
    mode = run_modes.model_modes()[0]
    per = run_modes._picks(_typed(result), index, found, mode)
    run = run_modes.ModeRun(mode, None, picks=per[0])
    for d in ("fwd", "bwd-data", "bwd-filter"):
        pick, s = pick_of(run, d), searches[d]
        assert pick.ok and pick.engine_tag == s.winner, pick.error
        assert pick.steady is None and pick.first_call_ms > 0
        # every field the search gives, against the log parsed here on its own
        assert pick.candidates == [dict(tag=c.tag, numeric_notes=c.numeric_notes,
                                        behavior_notes=c.behavior_notes,
                                        workspace_bytes=c.workspace_bytes, source=c.source)
                                   for c in s.candidates]
        assert [tuple(t) for t in pick.timed] == [tuple(t) for t in s.timed] and s.timed
        w = s.candidate(s.winner)
        assert (pick.plan_workspace_bytes, pick.numeric_notes, pick.deterministic) == (
            w.workspace_bytes, w.numeric_notes, w.deterministic)
        assert (pick.heuristic_candidates, pick.fallback_candidates) == (
            s.heuristic_count, s.fallback_count)
        assert pick.benchmark_limit == result["settings"].get("benchmark_limit")
    # the same picks a per-problem child's record of these calls gives
    child = ProblemChildResult.read(_fixture_json("default_benchmark.result.json"), "r")
    child = dataclasses.replace(child, log_text=log.decode())
    for d in ("fwd", "bwd-data", "bwd-filter"):
        theirs = pick_of(run_modes.ModeRun(mode, child), d)
        assert (theirs.engine_tag, theirs.candidates, theirs.timed,
                theirs.plan_workspace_bytes, theirs.heuristic_candidates) == (
            per[0][d].engine_tag, per[0][d].candidates, per[0][d].timed,
            per[0][d].plan_workspace_bytes, per[0][d].heuristic_candidates)
    assert pick_of(run_modes.ModeRun(mode, None, picks={}), "fwd").error == \
        "the run made no fwd call of this problem"
    # a peak outside every convolution call names no call
    result["sizes"][0]["other_peak_alloc"] = 5 * GIB
    assert run_modes._size_run(_size(result["sizes"][0]), index, found[0]).peak_call is None


def _model_run():
    problem, result, log = _fixture_child_result()
    index = {problem: 0}
    bench = _size_run(result["sizes"][0], index, log)
    heur = json.loads(json.dumps(result["sizes"][0]))
    heur.update(first_ms=900.0, first_peak_alloc=3 * GIB + 200 * 2**20)
    for c in heur["calls"]:
        c["peak_alloc"] = c["alloc_before"] + 50 * 2**20
    heur["other_peak_alloc"] = 3 * GIB + 200 * 2**20
    from cudnn_explorer.core.model_run import ModelModeRun
    run = ModelRun(modes=[
        ModelModeRun("benchmark", "benchmark", 10, sizes=[bench]),
        ModelModeRun("heuristics (benchmark off)", "heuristic",
                     sizes=[_size_run(heur, index, log)]),
        ModelModeRun("deterministic", "deterministic", error="PyTorch's run of the model "
                     "(deterministic) failed (exit code 1): RuntimeError: boom")],
        iterations=4, warmup=5)
    cap = Capture(model=ModelSpec(name="onelayer", input_shape=[3, 224, 224], batch=32),
                  problems=[UniqueConv(problem, {"fwd": 1, "bwd-data": 1, "bwd-filter": 1},
                                       ["conv1"])], conv_calls=3)
    return run, cap


def test_report_explains_the_first_iteration_and_its_memory_peak():
    run, cap = _model_run()
    text = render_model_run(run, cap)
    assert "first iteration with benchmark on vs off: 1700 vs 900 ms" in text
    assert "peak allocated 4.44 vs 3.20 GiB" in text
    assert "was set during #1 bwd-f (conv1): 1.44 GiB above" in text
    assert "heuristics (benchmark off): the first iteration peaked at 3.20 GiB allocated " \
           "outside any convolution call" in text
    assert "failed (exit code 1): RuntimeError: boom" in text
    assert "costliest first calls" in text and "1227.8 ms: #1 fwd (conv1)" in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_steady_on_vs_off_says_when_its_spread_is_too_wide_to_act_on():
    run, cap = _model_run()
    bench, heur = run.mode("benchmark").sizes[0], run.mode("heuristic").sizes[0]
    bench.steady.samples_ms = [10.0, 10.1, 10.2, 10.3]     # IQR / median 1%
    heur.steady.samples_ms = [9.0, 9.05, 9.1, 9.15]
    text = " ".join(render_model_run(run, cap).split())
    assert "steady 10.15 vs 9.07 ms per iteration" in text and "noisy" not in text
    bench.steady.samples_ms = [8.0, 10.0, 14.0, 20.0]      # IQR 6 over median 12: 50%
    text = " ".join(render_model_run(run, cap).split())
    assert "steady 12.00 vs 9.07 ms per iteration, but noisy (IQR / median on 50%, " \
           "above 10%): not a difference to act on" in text
    assert max(len(line) for line in render_model_run(run, cap).splitlines()) <= 120
    heur.steady.samples_ms = []                             # a mode with no steady times
    text = " ".join(render_model_run(run, cap).split())
    assert "first iteration with benchmark on vs off: 1700 vs 900 ms" in text
    assert "ms per iteration" not in text.split("first iteration with benchmark on")[1][:200]


def test_sweep_file_version_2_round_trips_and_version_1_loads():
    run, cap = _model_run()
    sw = ModelSweep(capture=cap, entries=[], profile="quick", environment=ENV,
                    pytorch_run=run)
    back = ModelSweep.from_json(sw.to_json())
    assert back.pytorch_run == run and back.profile == "quick"
    assert "PyTorch's own run of the model" in render_sweep(back)
    old = json.loads(sw.to_json())
    old["schema_version"] = 1
    del old["pytorch_run"]
    v1 = ModelSweep.from_dict(old)
    assert v1.pytorch_run is None and "own run of the model" not in render_sweep(v1)
    # the thorough profile's name before the staged search; another name is refused
    assert ModelSweep.from_dict(dict(old, profile="deep")).profile == "thorough"
    with pytest.raises(UserError, match='profile: "fast": valid: quick, thorough'):
        ModelSweep.from_dict(dict(old, profile="fast"))
    bad = json.loads(sw.to_json())
    bad["pytorch_run"]["modes"][0]["sizes"][0]["calls"][0]["problem"] = 7
    with pytest.raises(Exception, match="names problem 7"):
        ModelSweep.from_dict(bad)
    bad["schema_version"] = 3
    with pytest.raises(Exception, match="reads versions 1, 2"):
        ModelSweep.from_dict(bad)


@pytest.mark.parametrize("body,match", [
    ("import sys; sys.stderr.write('RuntimeError: no model here\\n'); sys.exit(1)",
     "failed \\(exit code 1\\): RuntimeError: no model here"),
    ("import time; time.sleep(30)", "did not finish within 2 s"),
])
def test_failing_child_keeps_its_error_per_mode_and_per_problem(tmp_path, monkeypatch, body,
                                                                 match):
    from cudnn_explorer.measure import prestart

    # a child that never says it is ready is let go after this, then its own limit counts
    monkeypatch.setattr(prestart, "READY_TIMEOUT_S", 1.0)
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {os.sys.executable} -c \"{body}\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    problem = ConvProblem.create("2,3,8,8", out_channels=8, kernel=3, padding=1)
    cap = Capture(model=ModelSpec(name="tiny", input_shape=[3, 8, 8], batch=2),
                  problems=[UniqueConv(problem, {"fwd": 1}, ["0"])], conv_calls=1)
    opts = ExploreOptions.create(child_timeout_s=2)
    run, per = run_modes.run_model(cap, opts,
                                   run_modes.ModeTiming(iterations=2, python=str(fake)))
    assert [m.label for m in run.modes] == [m.label for m in run_modes.model_modes()]
    import re
    assert all(re.search(match, m.error) and not m.ok for m in run.modes)
    assert all(r.result is None and re.search(match, r.error) for r in per[problem])


@pytest.mark.ext
@pytest.mark.parametrize("sample", [False, True])
def test_quick_profile_times_only_the_listed_engine_configs(sample):
    """--profile quick: the configs PyTorch listed and cuDNN's heuristic modes list, no
    sampling of the knob space."""
    from cudnn_explorer.measure.engines import PreparedSearch, explore_engines
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings
    from fakes import FakeOut, FakeSearch

    problem = ConvProblem.create("2,3,8,8", out_channels=8, kernel=3, padding=1)
    seen = []
    space = explore_engines(
        DirectionData(problem, "fwd", None, {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()},
                      None),
        SearchSettings(timing=ExploreOptions.create(budget_ms=1).timing, kernels=False,
                       preferred_tags=["ConvFwd_eng0"], sample=sample),
        prepared=PreparedSearch(FakeSearch(seen)))
    tags = sorted(c.tag for c in space.configs)
    listed = ["ConvFwd_eng0", "ConvFwd_eng1_k2=1"]  # PyTorch's, heuristic mode A's
    if sample:  # the engine's default and the rest of its knob space too
        assert set(listed) < set(tags) and "ConvFwd_eng1_k2=0" in tags
    else:
        assert tags == listed
    assert space.sampled is sample


def test_children_run_the_whole_flow_on_the_cpu(tmp_path, monkeypatch):
    """Every mode's real child process, on the CPU (no cuDNN, so no log and no picks):
    the first iteration's calls, the steady iterations, and the error that says why
    PyTorch's choice is unknown."""
    from conftest import tiny_factory

    tinynets = tiny_factory(tmp_path, monkeypatch, "tinynets", convs=3)
    spec = ModelSpec(factory="tinynets:tiny", input_shape=[3, 8, 8], batch=2, sizes=[8, 12])
    from cudnn_explorer.core.capture import merge_sizes
    from dataclasses import replace

    caps = [capture(tinynets.tiny(), [torch.randn(2, 3, s, s)],
                    replace(spec, input_shape=[3, s, s], sizes=[]), "cpu") for s in (8, 12)]
    cap = merge_sizes(caps, [8, 12], spec)
    opts = ExploreOptions.create(child_timeout_s=120)
    run, per = run_modes.run_model(cap, opts,
                                   run_modes.ModeTiming(iterations=3, warmup=1, device=-1))
    assert [m.label for m in run.modes] == [m.label for m in run_modes.model_modes()]
    for m in run.modes:
        assert "wrote no cudnn-frontend log" in m.error
        assert [s.input_shape for s in m.sizes] == [[3, 8, 8], [3, 12, 12]]
        first, second = m.sizes
        # 3 forward, 1 + 2 + 2 backward calls per iteration; first calls: 2 problems at
        # size 8 (fwd 2, bwd-data 1, bwd-filter 2), 2 new ones at size 12
        assert first.conv_calls == second.conv_calls == 8
        assert len(first.calls) == len(second.calls) == 5
        assert {c.problem for c in first.calls} == {0, 1}
        assert {c.problem for c in second.calls} == {2, 3}
        assert first.steady is not None and len(first.steady.samples_ms) == 3
        assert first.steady.method == "eager" and not first.steady.note
        # where its wall time went: the wait for its imports, the child's own phases, the
        # parent's read of its log; together no more than the whole
        assert list(m.phases_s) == [mode_runner.WAITED, "setup", "first iterations",
                                    "steady iterations", run_modes.LOG_READ], m.phases_s
        assert all(v >= 0 for v in m.phases_s.values())
        assert sum(m.phases_s.values()) <= m.wall_s + 1e-3
        assert m.phases_s["first iterations"] > 0 and m.phases_s["setup"] > 0
    text = render_model_run(run, cap)
    phases = next(x for x in text.splitlines() if x.startswith("- each mode's wall time (s): "))
    assert f"{run.modes[0].label} {run.modes[0].wall_s:.1f} (waited for its imports " in phases
    assert ModelRun.from_dict(run.to_dict()).modes[0].phases_s == run.modes[0].phases_s
    assert all(r.result is None and "wrote no cudnn-frontend log" in r.error
               for rs in per.values() for r in rs)
    # a graph asked for: none on the CPU, so eager, saying why; no eager round beside it
    mode = run_modes.model_modes()[2:3]
    run, _ = run_modes.run_model(cap, opts,
                                 run_modes.ModeTiming(iterations=3,
                                                      warmup=1, device=-1, graph=True),
                                 modes=mode)
    (m,) = run.modes
    for s in m.sizes:
        t = s.steady  # from the second, unprobed process (Note [steady process])
        assert t.method == "eager" and len(t.samples_ms) == 3 and t.eager_ms == []
        assert t.note == "no CUDA graphs on the CPU; timed eagerly"
    assert [len(s.calls) for s in m.sizes] == [5, 5]  # the first process's probe
    assert list(m.phases_s)[-2:] == [mode_runner.STEADY_PROCESS, run_modes.LOG_READ]
    assert sum(m.phases_s.values()) <= m.wall_s + 1e-3
    # the steady process failing: the first process's eager round stays, saying why
    real = mode_runner.run_child

    def steady_fails(spec, *args):
        if spec.get("steady_only"):
            return ModelChildResult(), "the steady timing's own process failed (exit code 1): boom"
        return real(spec, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mode_runner, "run_child", steady_fails)
        failed, _ = run_modes.run_model(cap, opts,
                                        run_modes.ModeTiming(iterations=3,
                                                             warmup=1, device=-1, graph=True),
                                        modes=mode)
    for s in failed.modes[0].sizes:
        assert s.steady.method == "eager" and len(s.steady.samples_ms) == 3
        assert s.steady.note == ("the steady timing's own process failed (exit code 1): boom"
                                 "; one round of eager steps from the first process instead")

    # the steady process stopping after the first size: that size is its own, the next
    # keeps the first process's round, with the steady process's reason
    def steady_stops(spec, *args):
        if spec.get("steady_only"):
            result, _ = real(spec, *args)
            oom = "out of GPU memory at input 3x12x12: try a smaller --batch"
            return replace(result, sizes=result.sizes[:1], error=oom), oom
        return real(spec, *args)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mode_runner, "run_child", steady_stops)
        part, _ = run_modes.run_model(cap, opts,
                                      run_modes.ModeTiming(iterations=3,
                                                           warmup=1, device=-1, graph=True),
                                      modes=mode)
    first, second = part.modes[0].sizes
    assert first.steady.note == "no CUDA graphs on the CPU; timed eagerly"
    assert second.steady.note == ("out of GPU memory at input 3x12x12: try a smaller --batch; "
                                  "one round of eager steps from the first process instead")
    text = render_model_run(run, cap)
    assert "no CUDA graphs on the CPU; timed eagerly" in text and " g " not in text
    key = run_modes.run_key
    assert key(cap, mode[0], 0, opts, 3, 1, None) == key(cap, mode[0], 0, opts, 3, 1, None,
                                                           False)
    assert key(cap, mode[0], 0, opts, 3, 1, None, True) != key(cap, mode[0], 0, opts, 3, 1,
                                                                None)


def _tinynets(tmp_path, monkeypatch):
    """A capture of a tiny factory model on the CPU, importable by the children."""
    from conftest import tiny_factory

    tinynets = tiny_factory(tmp_path, monkeypatch, "tinynets")
    spec = ModelSpec(factory="tinynets:tiny", input_shape=[3, 8, 8], batch=2)
    return capture(tinynets.tiny(), [torch.randn(2, 3, 8, 8)], spec, "cpu")


def test_the_first_mode_set_up_ahead_of_its_turn_runs_it(tmp_path, monkeypatch):
    """Note [first mode set up ahead] in jobs/sweep.py, with the real children on the CPU:
    the first mode's process, given its setup before the capture, sets up and waits held;
    at its turn it runs the mode from the go's spec, its phases saying that its setup came
    ahead (outside its wall time); the second mode runs as before. One set up for another
    TF32 setting, or one that died in its setup, is replaced by a process started then."""
    from cudnn_explorer.core.model_run import AHEAD

    cap = _tinynets(tmp_path, monkeypatch)
    opts = ExploreOptions.create(child_timeout_s=120)
    modes = run_modes.model_modes()[:2]

    def setup(tf32=cap.tf32):
        return mode_runner.setup_spec(cap.model, modes[0], -1, opts.seed, tf32)

    with mode_runner.ModeStarts(cap.model, [False, False]) as starts:
        assert starts.prepare(0, setup()) and not starts.prepare(5, setup())
        first = starts._ahead[0][0]
        assert first.wait_held(120)  # set up, before its turn
        run, _ = run_modes.run_model(cap, opts,
                                     run_modes.ModeTiming(iterations=3, warmup=1, device=-1),
                                     modes=modes, started=starts)
    ahead, plain = run.modes
    assert list(ahead.phases_s)[:3] == [AHEAD, mode_runner.WAITED_SETUP, "first iterations"]
    assert "setup" not in ahead.phases_s and ahead.phases_s[AHEAD] > 0
    assert ahead.phases_s[mode_runner.WAITED_SETUP] < 1.0  # it was held already
    assert 0 <= ahead.rest_s <= ahead.wall_s
    assert list(plain.phases_s)[:2] == [mode_runner.WAITED, "setup"]
    for m in run.modes:  # the same run either way
        assert [s.input_shape for s in m.sizes] == [[3, 8, 8]]
        assert len(m.sizes[0].calls) == 5 and len(m.sizes[0].steady.samples_ms) == 3
        assert "wrote no cudnn-frontend log" in m.error
    text = render_model_run(run, cap)
    assert f"{ahead.label} {ahead.wall_s:.1f} (set up ahead of its turn " in " ".join(
        text.split())
    assert ModelRun.from_dict(run.to_dict()).modes[0].phases_s == ahead.phases_s
    said = []
    for spoil in ("tf32", "died"):
        with mode_runner.ModeStarts(cap.model, [False]) as starts:
            starts.prepare(0, setup(tf32=not cap.tf32) if spoil == "tf32" else setup())
            if spoil == "died":
                starts._ahead[0][0].proc.kill()
            run, _ = run_modes.run_model(cap, opts,
                                         run_modes.ModeTiming(iterations=3, warmup=1, device=-1),
                                         modes=modes[:1], started=starts, progress=said.append)
        (m,) = run.modes
        assert list(m.phases_s)[:2] == [mode_runner.WAITED, "setup"], spoil
        assert [s.input_shape for s in m.sizes] == [[3, 8, 8]], spoil
    assert sum("the process set up ahead could not serve; set up anew" in x
               for x in said) == 2


def test_a_model_process_held_after_its_setup_runs_the_gos_spec(tmp_path):
    """mode_child.run with "hold": the setup from the first spec, then the go's spec,
    whose setup keys must be the same; a parent gone (no go) ends it with nothing run."""
    from cudnn_explorer.model import mode_child

    spec = {"device": -1, "mode": "heuristic", "seed": 0, "tf32": True,
            "model": ModelSpec(name="resnet18", input_shape=[3, 8, 8], batch=2).to_dict()}
    pytest.importorskip("torchvision")
    final = dict(spec, shapes=[[3, 32, 32]], iterations=2, warmup=0)
    out = mode_child.run(dict(spec, hold=True), lambda res: None, hold=lambda: final)
    assert [s["input_shape"] for s in out["sizes"]] == [[3, 32, 32]]
    assert len(out["sizes"][0]["steady_ms"]) == 2 and "setup" in out["phases_s"]
    assert mode_child.run(dict(spec, hold=True), lambda res: None,
                           hold=lambda: None)["sizes"] == []
    with pytest.raises(ValueError, match="the spec changed after the setup ahead of its "
                                         "turn: mode, seed"):
        mode_child.run(dict(spec, hold=True), lambda res: None,
                        hold=lambda: dict(final, mode="benchmark", seed=1))


def test_a_failed_capture_is_tried_once_more_in_a_fresh_process_from_that_size():
    """Note [failed capture]: a steady process stops at a size whose capture failed; the
    next begins there with that size marked as retried, and the sizes after it go on
    there. A size that fails twice is timed eagerly, both tries named; a process that
    fails keeps the rest out, with why."""
    shapes = [[3, s, s] for s in (8, 12, 16, 20)]
    calls = []

    def child(fail, fail_twice=(), crash_at=None):
        def run(spec, model, timeout_s, python, what, ahead=None):
            calls.append(([s[1] for s in spec["shapes"]], [s[1] for s in spec["retried"]]))
            sizes = []
            for shape in spec["shapes"]:
                if shape[1] == crash_at:
                    return _typed({"sizes": sizes}), f"{what} failed (killed by SIGSEGV)"
                retry = shape in spec["retried"]
                if shape[1] in fail and not retry:
                    sizes.append(dict(input_shape=shape, steady_ms=[1.0], steady_method="eager",
                                      capture_failed=f"CUDA graph capture failed ({shape[1]})"))
                    return _typed({"sizes": sizes}), ""
                if shape[1] in fail_twice:
                    note = f"CUDA graph capture failed ({shape[1]}{'b' * (shape[1] > 12)})"
                    sizes.append(dict(input_shape=shape, steady_ms=[2.0, 2.0],
                                      steady_method="eager", steady_note=note))
                    return _typed({"sizes": sizes}), ""
                sizes.append(dict(input_shape=shape, steady_ms=[0.5], steady_method="graph"))
            return _typed({"sizes": sizes}), ""
        return run

    said = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mode_runner, "run_child", child(fail={12, 20}, fail_twice={20}))
        timed, why = mode_runner.steady({}, shapes, 60, None, "steady", said.append)
    assert why == ""
    assert calls == [([8, 12, 16, 20], []), ([12, 16, 20], [12]), ([20], [12, 20])]
    assert [timed[tuple(s)].steady_method for s in shapes] == ["graph"] * 3 + ["eager"]
    assert timed[(3, 12, 12)].steady_note == (
        "CUDA graph capture failed (12); captured in a fresh process that began at this size")
    assert not timed[(3, 16, 16)].steady_note
    assert timed[(3, 20, 20)].steady_note == (
        "CUDA graph capture failed (20), and again in a fresh process that began at this "
        "size (CUDA graph capture failed (20b)); timed eagerly")
    assert said == ["steady: CUDA graph capture failed (12) at input 3x12x12; captured once "
                    "more in a fresh process",
                    "steady: CUDA graph capture failed (20) at input 3x20x20; captured once "
                    "more in a fresh process"]
    # the same reason twice is said once
    assert mode_runner.after_failure("x", _size({"input_shape": [3], "steady_note": "x"})) == \
        "x, and again in a fresh process that began at this size; timed eagerly"
    # a process that dies: what finished stays, the rest is left with why (no endless retry)
    calls.clear()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mode_runner, "run_child", child(fail={8}, crash_at=16))
        timed, why = mode_runner.steady({}, shapes, 60, None, "steady", said.append)
    assert calls == [([8, 12, 16, 20], []), ([8, 12, 16, 20], [8])]
    assert sorted(timed) == [(3, 8, 8), (3, 12, 12)] and "SIGSEGV" in why


@pytest.mark.ext
def test_pytorchs_configs_are_timed_first_whatever_their_engine():
    """A time budget must never cut PyTorch's own configs: they go before every other
    engine's listed ones."""
    from cudnn_explorer.measure.engines import PreparedSearch, explore_engines
    from cudnn_explorer.measure.search_inputs import DirectionData, SearchSettings
    from fakes import FakeOut, FakeSearch

    problem = ConvProblem.create("2,3,8,8", out_channels=8, kernel=3, padding=1)
    seen = []
    explore_engines(
        DirectionData(problem, "fwd", None, {"x": FakeOut(), "w": FakeOut(), "y": FakeOut()},
                      None),
        SearchSettings(timing=ExploreOptions.create(budget_ms=1).timing, kernels=False,
                       preferred_tags=["ConvFwd_eng1_k2=0", "ConvFwd_eng0"], sample=False),
        prepared=PreparedSearch(FakeSearch(seen)))
    # in PyTorch's order, though engine 0 comes before engine 1 in cuDNN's
    assert [s[0] for s in seen[:2]] == ["eng1_k2=0", "eng0"]


def test_a_stored_run_of_the_model_answers_without_a_child(tmp_path):
    """A mode's run kept in the results store answers the next run of the same capture
    and options in the same environment: no child starts, and the picks come back."""
    from cudnn_explorer.store.db import Store

    problem, result, log = _fixture_child_result()
    cap = Capture(model=ModelSpec(name="onelayer", input_shape=[3, 224, 224], batch=32),
                  problems=[UniqueConv(problem, {"fwd": 1, "bwd-data": 1, "bwd-filter": 1},
                                       ["conv1"])], conv_calls=3)
    index = {problem: 0}
    size = _size_run(result["sizes"][0], index, log)
    from cudnn_explorer.core.model_run import ModelModeRun

    opts = ExploreOptions.create()
    mode = run_modes.model_modes()[0]
    typed = _typed(result)
    per = run_modes._picks(typed, index, run_modes.searches_of(typed, log), mode)
    with Store(str(tmp_path / "r.db")) as store:
        cache = run_modes.StoreCache(store, ENV, "onelayer", warn=lambda e: None)
        key = run_modes.run_key(cap, mode, 0, opts, 20, 5, None)
        cache.save(key, mode.label, ModelModeRun(mode.label, mode.mode, 10, sizes=[size])
                   .to_dict(), {str(i): {d: p.to_dict() for d, p in ps.items()}
                                for i, ps in per.items()})
        never = tmp_path / "python"  # a child would fail loudly
        never.write_text("#!/bin/sh\nexit 99\n")
        never.chmod(0o755)
        run, picks = run_modes.run_model(cap, opts, run_modes.ModeTiming(python=str(never)),
                                         cache=cache, modes=[mode])
        (m,) = run.modes
        assert m.ok and m.stored and m.sizes[0] == size
        pick = pick_of(picks[problem][0], "fwd")
        assert pick.ok and pick.engine_tag == size.calls[0].plan
        assert pick == per[0]["fwd"]  # every field back from the store as it was built
        assert "from the results store" in render_model_run(run, cap)
        (row,) = store.model_runs()
        assert row["mode"] == mode.label and row["model"] == "onelayer"
        # another environment, or --refresh: the child runs (and here fails)
        cache.read = False
        run, _ = run_modes.run_model(cap, opts, run_modes.ModeTiming(python=str(never)),
                                     cache=cache, modes=[mode])
        assert "exit code 99" in run.modes[0].error and not run.modes[0].stored
    from conftest import run_cli

    r = run_cli("history", "--store", str(tmp_path / "r.db"))
    assert r.returncode == 0 and "PyTorch's own runs of models" in r.stdout, r.stderr
    assert "onelayer" in r.stdout and mode.label in r.stdout


def failing_python_and_capture(tmp_path):
    """(a "python" that exits 5 at once, a problem, a capture of that one problem): mode
    children that fail at once, for what run_model does around them."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 5\n")
    fake.chmod(0o755)
    problem = ConvProblem.create("2,3,8,8", out_channels=8, kernel=3, padding=1)
    cap = Capture(model=ModelSpec(name="tiny", input_shape=[3, 8, 8], batch=2),
                  problems=[UniqueConv(problem, {"fwd": 1}, ["0"])], conv_calls=1)
    return fake, problem, cap


def test_a_share_of_the_modes_runs_only_those_under_their_own_keys(tmp_path):
    """torchrun: each rank runs its share of the modes (their positions in the full list,
    so the store keys are those a whole run would use)."""
    fake, problem, cap = failing_python_and_capture(tmp_path)
    opts = ExploreOptions.create(child_timeout_s=5)
    asked = []

    class Cache:
        def lookup(self, key):
            asked.append(key)
            return None

        def save(self, *a):
            raise AssertionError("a failed run is not kept")

    modes = run_modes.model_modes()
    run, per = run_modes.run_model(cap, opts,
                                   run_modes.ModeTiming(iterations=2, python=str(fake)),
                                   cache=Cache(), share=range(1, len(modes), 2))
    assert [m.label for m in run.modes] == [modes[k].label for k in range(1, len(modes), 2)]
    assert len(per[problem]) == len(run.modes)
    assert asked == [run_modes.run_key(cap, modes[k], k, opts, 2, 5, None)
                     for k in range(1, len(modes), 2)]


def test_plans_pytorch_picked_are_retimed_in_full(monkeypatch):
    """advise's re-timing of the plans PyTorch picked times every one of them in full: no
    staged search (the default profile's) between them, and no other configs sampled."""
    from cudnn_explorer.core.errors import ChildError
    from cudnn_explorer.core.search_preferences import SearchPreferences
    from cudnn_explorer.measure import engine_worker

    seen = []

    def fake(problem, direction, options, preferences=SearchPreferences(), **kw):
        seen.append((direction, options, list(preferences.preferred_tags)))
        raise ChildError("no GPU here")

    monkeypatch.setattr(engine_worker, "explore_isolated", fake)
    _, cap = _model_run()
    counts = {"ConvFwd_eng1": 3, "ConvFwd_eng2_k2=1": 2}
    opts = ExploreOptions.create(budget_ms=7)
    assert opts.staged  # the default profile
    assert run_modes._retimed(cap, 0, "fwd", counts, opts, lambda m: None, None) == {}
    [(d, o, tags)] = seen
    assert d == "fwd" and tags == list(counts)
    assert not o.staged and not o.engine_sampling and o.budget_ms == 7.0


def test_a_model_sweeps_quick_profile_leaves_out_benchmark_with_every_candidate(tmp_path):
    """The quick model profile runs the model in benchmark (PyTorch's limit), heuristics
    and deterministic mode; the thorough one adds benchmark with every candidate timed.
    The store keys of everything else stay as they were."""
    from cudnn_explorer.store.db import options_key

    def labels(modes):
        return [m.label for m in modes]

    assert labels(run_modes.model_modes()) == [
        "benchmark", "benchmark, limit 0 (all)", "heuristics (benchmark off)", "deterministic"]
    assert labels(run_modes.model_modes(every_candidate=False)) == [
        "benchmark", "heuristics (benchmark off)", "deterministic"]
    assert labels(run_modes.model_modes(5, every_candidate=False))[:2] == [
        "benchmark, limit 5", "heuristics (benchmark off)"]
    assert run_modes.model_modes(0, every_candidate=False) == run_modes.model_modes(0)
    base = ExploreOptions.create(child_timeout_s=5)
    quick = base.profiled("quick", model=True)
    assert quick.every_candidate_mode is False
    assert base.profiled("thorough", model=True).every_candidate_mode is True
    assert base.profiled("quick").every_candidate_mode is True  # a single problem's
    assert "every_candidate_mode" not in options_key(base) and \
        '"every_candidate_mode":false' in options_key(quick)
    # Note [model legacy rows]: the model's quick profile runs Find under PyTorch's math
    # type only; the single problem's profiles and the model's thorough keep every one
    from cudnn_explorer.measure.legacy import find_math_types
    assert quick.every_math_type is False and '"every_math_type":false' in options_key(quick)
    assert "every_math_type" not in options_key(base)
    assert base.profiled("thorough", model=True).every_math_type is True
    assert base.profiled("quick").every_math_type is True
    fp16 = ConvProblem.create(shape=(8, 16, 14, 14), out_channels=16, kernel=3, padding=1,
                              dtype="float16")
    assert find_math_types(fp16, base) == fp16.find_math_types and len(
        fp16.find_math_types) == 4
    assert find_math_types(fp16, quick) == (fp16.math_type,) == fp16.find_math_types[:1]
    # run_model's modes, unless given, are those the options say
    fake, _, cap = failing_python_and_capture(tmp_path)
    run, _ = run_modes.run_model(cap, quick,
                                 run_modes.ModeTiming(iterations=2, python=str(fake)))
    assert labels(run.modes) == labels(run_modes.model_modes(every_candidate=False))
