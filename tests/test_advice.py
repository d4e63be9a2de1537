"""The advisor on the CPU: the break-even arithmetic and the verdict rules from made-up
costs checked by hand, the shape-distribution parser, a saved advice rendered with
--load, and bad input (one line, exit 2)."""
import gzip
import json
import math
import random

import pytest
from dataclasses import replace

from cudnn_explorer.core.stats import Z95
from cudnn_explorer.core.advice import (Advice, ShapeCost, _met, best_bucketing, break_even,
                                        costs_from_run, expected_total_ms, steady_difference,
                                        verdict)
from cudnn_explorer.core.workload_sizes import parse_shape_dist
from cudnn_explorer.core.capture import Capture, ModelSpec
from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.model_run import IterationTiming, ModelModeRun, ModelRun, SizeRun
from cudnn_explorer.report.advice import render_advice
from conftest import run_cli
from fakes import ENV


def samples(mean, sd, n=200, seed=0):
    rng = random.Random(seed)
    xs = [rng.gauss(mean, sd) for _ in range(n)]
    shift = mean - sum(xs) / n  # exactly ``mean``: the arithmetic below is by hand
    return tuple(x + shift for x in xs)


def one(size=224, share=1.0, over_on=2000.0, over_off=200.0, on=100.0, off=110.0, sd=0.5,
        seed=0):
    return ShapeCost(size, share, over_on, over_off, samples(on, sd, seed=seed),
                     samples(off, sd, seed=seed + 1), 7 * 2**30, 3 * 2**30)


def test_one_size_break_even_and_totals_by_hand():
    c = [one()]
    # T_on(n) - T_off(n) = (2000 - 200) + n (100 - 110) <= 0 from n = 180
    assert break_even(c) == 180
    assert expected_total_ms(c, True, 1000) == pytest.approx(2000 + 1000 * 100)
    assert expected_total_ms(c, False, 1000) == pytest.approx(200 + 1000 * 110)
    d, lo, hi = steady_difference(c)
    assert d == pytest.approx(10.0) and lo < 10 < hi and hi - lo < 0.3
    v = verdict(c, 1000)
    assert v.choice == "on" and "after 180 iterations" in v.reason
    v = verdict(c, 100)
    assert v.choice == "off" and "paid back only after 180 iterations (of 100)" in v.reason


def test_no_measurable_saving_or_a_slower_benchmark_says_off():
    noisy = [one(on=100.0, off=100.05, sd=5.0)]
    v = verdict(noisy, 10**6)
    assert v.choice == "off" and "no measurable steady time" in v.reason
    assert v.saving_low_ms < 0 < v.saving_high_ms
    slower = [one(on=105.0, off=100.0)]
    v = verdict(slower, 10**6)
    assert v.choice == "off" and "slower in steady state by 5.00 ms" in v.reason
    assert break_even(slower) is None


def test_the_spread_between_processes_widens_the_interval():
    """Each mode is one process: a steady difference smaller than how much processes with
    benchmark on differ from each other is no measurable saving, however tight each
    process's own samples are."""
    tight = one(on=100.0, off=103.0, sd=0.2)
    assert verdict([tight], 10**6).choice == "on"  # within each process: 3 ms is clear
    spread = ShapeCost(**{**tight.__dict__, "process_means_on": (100.0, 104.0, 97.0)})
    d, lo, hi = steady_difference([spread])
    half = Z95 * math.sqrt(2 * 37 / 3)  # var(100, 104, 97) = 37/3, for each mode
    assert d == pytest.approx(3.0) and (hi - lo) / 2 == pytest.approx(half, rel=1e-5)
    v = verdict([spread], 10**6)
    assert v.choice == "off" and "no measurable steady time" in v.reason
    # processes that agree leave the within-process interval as it was
    same = ShapeCost(**{**tight.__dict__, "process_means_on": (100.0, 100.01)})
    assert steady_difference([same]) == steady_difference([tight])


def test_probability_a_size_is_met():
    assert _met(0.5, 2) == pytest.approx(0.75)
    assert _met(1.0, 1) == 1.0 and _met(0.1, 0) == 0.0
    assert _met(1e-9, 10**9) == pytest.approx(1 - math.exp(-1), rel=1e-6)


def test_many_rare_sizes_are_bucketed():
    """Ten equally frequent, close sizes, each with a costly search: padding to fewer
    sizes searches less, at the price of slightly larger inputs."""
    sizes = list(range(600, 640, 4))
    costs = [one(s, 0.1, over_on=20000.0, over_off=500.0, on=s * s / 4000,
                 off=s * s / 4000 * 1.10, seed=k) for k, s in enumerate(sizes)]
    n = 20000
    v = verdict(costs, n)
    b = best_bucketing(costs, n)
    assert v.choice == "bucket" and v.bucketing == b and 636 in b.sizes
    assert verdict(costs, 2000).choice == "off"  # too few iterations to pay any search
    # the bucketed total by hand: each bucket's share is that of the sizes padded up to it
    keep = sorted(b.sizes)
    total = 0.0
    for bsize in keep:
        share = sum(c.share for c in costs
                    if next(x for x in keep if x >= c.size) == bsize)
        if share:
            cb = next(c for c in costs if c.size == bsize)
            total += (1 - (1 - share) ** n) * cb.overhead_on_ms + n * share * cb.mean_on
    assert b.total_ms == pytest.approx(total)
    assert b.total_ms < min(v.total_on_ms, v.total_off_ms)


def test_shape_distribution_file():
    text = "# yolo sizes\n320 12\n416, 30.5\n\n512: 2  # rare\n"
    assert parse_shape_dist(text, "d.txt") == [(320, 12.0), (416, 30.5), (512, 2.0)]


def test_a_file_an_editor_wrote_with_a_byte_order_mark_reads(tmp_path):
    from cudnn_explorer.core.files import read_text

    f = tmp_path / "d.txt"
    f.write_bytes(b"\xef\xbb\xbf320 12\n416 30.5\n")
    assert parse_shape_dist(read_text(str(f), "--shape-dist"), str(f)) == [(320, 12.0),
                                                                           (416, 30.5)]


@pytest.mark.parametrize("text,match", [
    ("320\n", "line 1 \"320\": expected SIZE COUNT"),
    ("320 1\nabc 3\n", "line 2 \"abc 3\": size 'abc'"),
    ("320 -1\n", "count '-1': valid: a number > 0"),
    ("320 0\n", "count '0'"),
    ("320 nan\n", "count 'nan'"),
    ("320 1\n320 2\n", "line 2 \"320 2\": size 320 is listed twice"),
    ("0 1\n", "size '0': valid: an integer from 1 to 65536"),
    ("# nothing\n", "no sizes"),
])
def test_bad_shape_distribution_names_file_and_line(text, match):
    with pytest.raises(UserError, match=match.replace("(", r"\(")) as e:
        parse_shape_dist(text, "d.txt")
    assert "--shape-dist 'd.txt'" in str(e.value)


def _size(size, first, mean, peak):
    return SizeRun(input_shape=[3, size, size], first_ms=first,
                   first_peak_reserved_bytes=peak,
                   steady=IterationTiming(samples_ms=list(samples(mean, 0.3)), warmup=5))


def advice():
    run = ModelRun(modes=[
        ModelModeRun("benchmark", "benchmark", 10, sizes=[
            _size(320, 3000.0, 40.0, 6 * 2**30), _size(416, 4000.0, 60.0, 8 * 2**30)]),
        ModelModeRun("heuristics (benchmark off)", "heuristic", sizes=[
            _size(320, 600.0, 44.0, 3 * 2**30), _size(416, 700.0, 66.0, 4 * 2**30)]),
        ModelModeRun("deterministic", "deterministic", sizes=[
            _size(320, 650.0, 50.0, 3 * 2**30), _size(416, 750.0, 75.0, 4 * 2**30)])],
        iterations=10, warmup=5, target_ci=0.005)
    from cudnn_explorer.core.capture import UniqueConv
    from cudnn_explorer.core.problem import ConvProblem

    cap = Capture(model=ModelSpec(name="yolo", input_shape=[3, 320, 320], batch=16,
                                  sizes=[320, 416]),
                  problems=[UniqueConv(ConvProblem.create("16,3,320,320", out_channels=32,
                                                          kernel=3),
                                       {"fwd": 1, "bwd-filter": 1}, ["model.0.conv"])])
    return Advice(capture=cap, pytorch_run=run, sizes=[[320, 3], [416, 1]], iterations=5000,
                  environment=ENV, tool_version="0.2.0", created="2026-11-30T00:00:00+00:00")


def test_costs_from_the_runs_and_the_report():
    adv = advice()
    costs = costs_from_run(adv.pytorch_run, adv.workload)
    assert [c.share for c in costs] == [0.75, 0.25]
    assert costs[0].overhead_on_ms == pytest.approx(3000 - 40)
    text = render_advice(adv)
    assert "== verdict for 5000 iterations: turn benchmark mode ON" in text
    # by hand: saving 0.75 * 4 + 0.25 * 6 = 4.5 ms per iteration
    assert "saves 4.50 ms per iteration" in text
    run = adv.pytorch_run
    det = sum(w * s.steady.median_ms for w, s in zip((0.75, 0.25), run.mode("deterministic").sizes))
    ben = sum(w * s.steady.median_ms for w, s in zip((0.75, 0.25), run.mode("benchmark").sizes))
    assert f"deterministic mode: {det:.2f} ms per iteration vs {ben:.2f} ms" in text
    assert "peak memory of the first iteration (reserved): 8.00 GiB with benchmark on, " \
           "4.00 GiB off" in text
    assert max(len(line) for line in text.splitlines()) <= 120


def test_repeats_give_the_spread_between_processes():
    adv = advice()
    assert "the noise within each process only" in render_advice(adv)
    rep = ModelRun(modes=[
        ModelModeRun(f"benchmark, repeat {k}", "benchmark", 10,
                     sizes=[_size(320, 3000.0, m320, 8 * 2**30),
                            _size(416, 4000.0, m416, 8 * 2**30)])
        for k, (m320, m416) in enumerate([(43.0, 61.0), (37.0, 59.0)])]
        + [ModelModeRun("benchmark, repeat 3", "benchmark", 10, error="boom")],
        iterations=3, warmup=1)
    costs = costs_from_run(adv.pytorch_run, adv.workload, rep)
    assert [c.process_means_on for c in costs] == [
        pytest.approx((40.0, 43.0, 37.0)), pytest.approx((60.0, 61.0, 59.0))]
    adv.repeats = rep
    text = render_advice(adv)
    assert "the spread between the 3 processes with benchmark on" in text
    # 320: saving 4 ms, but processes with benchmark on differ by +-3 ms: not measurable
    # in sum (0.75 * 4 + 0.25 * 6 = 4.5 ms, CI half-width 1.96 * sqrt(0.75^2 * 2 * 9 +
    # 0.25^2 * 2 * 1) = 6.28 ms)
    assert "no measurable steady time (+4.50 ms per iteration, 95% CI -1.78 to +10.78)" \
        in text.replace("\n  ", " ")


def _graphed(size, first, graph_mean, eager_mean, peak):
    """A size timed as CUDA-graph replays, with eager iterations beside them."""
    s = _size(size, first, graph_mean, peak)
    s.steady.method = "graph"
    s.steady.eager_ms = list(samples(eager_mean, 0.3, n=10))
    return s


def test_graph_timed_steps_compare_like_with_like():
    """Graph replays on both sides: the saving is the GPU's; with a graph on one side only,
    eager steps on both sides (never a graph against an eager step)."""
    adv = advice()
    on, off = adv.pytorch_run.mode("benchmark"), adv.pytorch_run.mode("heuristic")
    on.sizes = [_graphed(320, 3000.0, 30.0, 40.0, 8 * 2**30),
                _graphed(416, 4000.0, 50.0, 60.0, 8 * 2**30)]
    off.sizes[0] = _graphed(320, 600.0, 33.0, 44.0, 3 * 2**30)
    costs = costs_from_run(adv.pytorch_run, adv.workload)
    assert [c.method for c in costs] == ["graph", "eager"]
    assert costs[0].mean_on == pytest.approx(30.0) and costs[0].mean_off == pytest.approx(33.0)
    # 416: graph on, eager off: on's eager round (60) against off's eager samples (66)
    assert costs[1].mean_on == pytest.approx(60.0) and costs[1].mean_off == pytest.approx(66.0)
    text = render_advice(adv).replace("\n  ", " ")
    assert ("replays of a CUDA graph of the whole step, the GPU's time without the host's; "
            "timed in a second fresh process per mode, whose benchmark search is its own; the "
            "same step run eagerly there (host time included), median ms on/off, 320: "
            "40.00/44.00") in text
    assert "steady iterations run eagerly, between CUDA events, host time included, for " \
           "size 416" in text
    # 0.75 * 3 + 0.25 * 6 = 3.75 ms
    assert "saves 3.75 ms per iteration" in text


def test_cli_renders_a_saved_advice_and_refuses_bad_input(tmp_path):
    path = tmp_path / "advice.json"
    path.write_text(advice().to_json())
    r = run_cli("advise", "--load", str(path))
    assert r.returncode == 0 and "turn benchmark mode ON" in r.stdout, r.stderr
    dist = tmp_path / "dist.txt"
    dist.write_text("320 4\n416 x\n")
    for args, match in [
        (["resnet18", "--iterations", "0"], "--iterations 0"),
        (["resnet18", "--shape-dist", str(dist)], "line 2 \"416 x\": count 'x'"),
        (["resnet18", "--shape-dist", str(dist), "--sizes", "320,416"],
         "--sizes would be ignored"),
        (["resnet18", "--target-ci", "0"], "--target-ci 0: valid"),
        (["resnet18", "--shape-dist", str(tmp_path / "none.txt")], "none.txt'"),
        (["--load", str(path), "--batch", "4"], "--batch would be ignored"),
    ]:
        r = run_cli("advise", *args, env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode == 2 and match in r.stderr.strip().splitlines()[-1], (args, r.stderr)
        assert "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "cudnn_explorer.advice", "schema_version": 9}')
    r = run_cli("advise", "--load", str(bad))
    assert r.returncode == 2 and "reads version 1" in r.stderr
    # a file that parses but holds what no run can: one line each, exit 2
    for change, match in [(lambda d: d.update(sizes=[]), "sizes: empty; valid"),
                          (lambda d: d.update(sizes=[[320, 0]]),
                           "sizes[0] [320.0, 0.0]: valid: [size, count], an integer size >= 1 "
                           "and a count > 0"),
                          (lambda d: d["capture"]["model"].update(amp="fp8"),
                           'Capture.model.amp "fp8": valid: off, fp16, bf16')]:
        d = json.loads(advice().to_json())
        change(d)
        bad.write_text(json.dumps(d))
        r = run_cli("advise", "--load", str(bad))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and match in lines[0], r.stderr
    # any input side advise measured reads back: --input 1x160000 saves [[160000, 1.0]]
    d = json.loads(advice().to_json())
    d["sizes"] = [[160000, 1.0]]
    assert Advice.from_json(json.dumps(d)).workload == [(160000, 1.0)]


def _repeat(plans):
    """A benchmark-mode run whose first calls picked ``plans`` ({(problem, dir): tag})."""
    from cudnn_explorer.core.model_run import ConvCall

    calls = [ConvCall(problem=p, direction=d, first=True, ms=1.0, plan=t)
             for (p, d), t in plans.items()]
    return ModelModeRun("benchmark, repeat", "benchmark", 10,
                        sizes=[SizeRun(input_shape=[3, 320, 320], calls=calls)])


def test_pick_stability_counts_plans_and_measures_their_spread():
    from cudnn_explorer.core.stability import Stability, pick_stability

    a, b = "ConvFwd_eng62_k2=5", "ConvFwd_eng62_k2=4"
    rep = ModelRun(modes=[
        _repeat({(0, "fwd"): a, (0, "bwd-data"): "ConvBwdData_eng1"}),
        _repeat({(0, "fwd"): b, (0, "bwd-data"): "ConvBwdData_eng1"}),
        _repeat({(0, "fwd"): a, (0, "bwd-data"): "ConvBwdData_eng1"}),
        ModelModeRun("benchmark, repeat", "benchmark", 10, error="boom")])
    st = pick_stability(rep)
    assert [(s.problem, s.direction, s.counts) for s in st] == [
        (0, "fwd", {a: 2, b: 1}), (0, "bwd-data", {"ConvBwdData_eng1": 3})]
    assert not st[0].stable and st[1].stable
    timed = Stability(0, "fwd", {a: 2, b: 1}, {a: 0.0250, b: 0.0285})
    assert timed.spread == pytest.approx(0.14)
    assert Stability(0, "fwd", {a: 2, b: 1}, {a: 0.025}).spread is None
    adv = advice()
    adv.repeats, adv.stability = rep, [timed, st[1]]
    text = render_advice(Advice.from_json(adv.to_json()))
    assert "== pick stability: 3 fresh processes with benchmark on (1 failed)" in text
    assert "the same plan every time for 1 of 2 problem-directions" in text
    assert "14.0%" in text and "a lottery for 1 of these" in text
    bad = json.loads(adv.to_json())
    bad["stability"][0]["problem"] = 3
    with pytest.raises(UserError, match="stability: problem 3"):
        Advice.from_json(json.dumps(bad))


def test_bad_repeats_exit_2():
    for value in ("1", "51", "x", "-2"):
        r = run_cli("advise", "resnet18", "--repeats", value,
                    env={"CUDA_VISIBLE_DEVICES": ""})
        assert r.returncode == 2 and "--repeats" in r.stderr, r.stderr


def test_plans_needed_per_thread_and_per_size():
    """One plan per unique problem and direction: forward ones in the calling thread's
    cache, backward ones in the autograd thread's; the largest single size beside the
    whole workload's need; the report says both."""
    from cudnn_explorer.core.advice import plans_needed
    from cudnn_explorer.core.capture import SizeCapture, UniqueConv
    from cudnn_explorer.core.problem import ConvProblem

    def u(h, calls):
        return UniqueConv(problem=ConvProblem.create((2, 3, h, h), out_channels=8),
                          calls=calls)

    every = {"fwd": 1, "bwd-data": 1, "bwd-filter": 1}
    cap = Capture(model=ModelSpec(name="net", input_shape=[3, 8, 8], sizes=[8, 12]),
                  problems=[u(8, {"fwd": 1, "bwd-filter": 1}), u(4, every), u(12, every)],
                  sizes=[SizeCapture(size=8, problems=[0, 1]), SizeCapture(size=12, problems=[2])])
    assert plans_needed(cap) == ((3, 5), (2, 3))
    single = Capture(model=ModelSpec(name="net", input_shape=[3, 8, 8]),
                     problems=cap.problems[:2])
    assert plans_needed(single) == ((2, 3), (2, 3))


def fixture(name: str) -> str:
    import os

    from conftest import REPO
    return os.path.join(REPO, "tests", "fixtures", name)


def loaded_report(path: str) -> str:
    """``advise --load path``'s report, its whitespace runs made one space; every line of
    it within 120 characters."""
    r = run_cli("advise", "--load", path)
    assert r.returncode == 0, r.stderr
    assert all(len(line) <= 120 for line in r.stdout.splitlines())
    return " ".join(r.stdout.split())


def test_h200_resnet50_advice_renders_from_its_file():
    """A real advice (ResNet-50, batch 32, fp32, 3 repeats, steps as CUDA-graph replays;
    measured on an H200) loads from its gzip file and renders without a GPU."""
    r = run_cli("advise", "--load", fixture("advice_r50_b32_fp32_h200.json.gz"))
    assert r.returncode == 0, r.stderr
    text = r.stdout.replace("\n  ", " ")
    assert "== verdict for 10000 iterations: leave benchmark mode OFF" in text
    assert ("plans: the workload needs 23 plans in the forward pass (the calling thread's "
            "cache) and 45 in the backward pass (the autograd thread's); PyTorch keeps up to "
            "10000 per thread") in text
    assert "== pick stability: 3 fresh processes with benchmark on (0 failed)" in text
    # the steps were graph replays and the repeats' eager: no spread between processes
    assert ("95% CI: the noise within each process only; how much one process's steady "
            "iterations differ from another's (CPU placement, other load) is not in it: no "
            "repeat has steady times of the same method to compare") in text
    # a row per plan, whole tags: two plans of one engine are told apart
    assert "eng68_k2=0_k13=0_k18=1_k25=0_k27=1_k28=1" in text
    assert "eng68_k2=0_k13=0_k18=1_k25=0_k27=1_k28=2" in text
    assert all(len(line) <= 120 for line in r.stdout.splitlines())


def test_h200_multi_size_advice_names_the_sizes_timed_eagerly():
    """A real advice over five sizes (ResNet-50, batch 16, measured on an H200) whose
    whole-step CUDA graph could not be captured at three of them: those sizes' steps are
    eager, and the report says which and why, beside the graph-timed ones."""
    text = loaded_report(fixture("advice_r50_b16_sizes_h200.json.gz"))
    assert "== verdict for 1000 iterations: leave benchmark mode OFF" in text
    assert ("steady iterations: replays of a CUDA graph of the whole step, the GPU's time "
            "without the host's") in text
    assert ("steady iterations run eagerly, between CUDA events, host time included, for "
            "size 448 (CUDA graph capture failed") in text
    assert "first iteration at each new input size with benchmark, in order: 320x320:" in text


def test_h200_five_sizes_pinned_no_search_at_any_size():
    """A real pinned advice over five sizes (ResNet-50, batch 16, fp32, H200, the plan file
    from the sweep of the same sizes): every call of every size pinned, no fallback, the
    verdict pin; each size's first iteration under a second, benchmark on's 4-9 s."""
    path = fixture("advice_r50_b16_sizes_pinned_h200.json.gz")
    adv = Advice.from_json(gzip.open(path).read().decode())
    costs = adv.costs()
    assert [c.size for c in costs] == [320, 384, 448, 512, 576]
    assert all(c.has_pinned and c.pinned_calls == 158 and c.fallback_calls == 0 for c in costs)
    v = verdict(costs, adv.iterations)
    assert v.choice == "pinned", v.reason
    assert v.total_pinned_ms < min(v.total_on_ms, v.total_off_ms)
    on = adv.pytorch_run.mode("benchmark")
    pin = adv.pytorch_run.mode("pinned")
    assert all(s.first_ms < 1000 for s in pin.sizes) and all(s.first_ms > 4000 for s in on.sizes)
    text = loaded_report(path)
    assert "== verdict for 1000 iterations: PIN the plan file (cudnn_explorer.pin)" in text
    assert ("over one iteration at each of the 5 sizes, 0.162 ms per iteration at their equal "
            "shares over benchmark mode's picks; the steady step realised +0.129 ms (80%;") in text
    assert "not pinned" not in text


def pinned(size, first, mean, peak, pinned_calls=100, fallback_calls=0):
    from cudnn_explorer.core.pin_report import PinCounts, PinnedDirection

    counts = PinCounts(directions=[
        PinnedDirection(key=[1], description="a", covered=True, pinned_calls=pinned_calls),
        PinnedDirection(key=[2], description="b", covered=False,
                        fallback_calls=fallback_calls, reason="the plan file does not cover it")])
    return replace(_size(size, first, mean, peak), pinned=counts)


def with_pinned(adv, sizes, uncovered="off", predicted=None):
    from dataclasses import replace as rep

    run = adv.pytorch_run
    mode = ModelModeRun(f"pinned (uncovered: benchmark {uncovered})", "pinned", sizes=sizes)
    return rep(adv, pytorch_run=rep(run, modes=run.modes + [mode]), plans="r.plans.json",
               plans_predicted_ms=predicted)


def test_three_modes_the_pinned_one_chosen_where_it_is_fastest_in_total():
    """Pinned: no search (first iteration as off's), steady faster than on: chosen, with
    its saving against both modes and against the plans' prediction."""
    adv = with_pinned(advice(), [pinned(320, 620.0, 39.0, 3 * 2**30),
                                 pinned(416, 720.0, 58.0, 4 * 2**30)], predicted=1.5)
    costs = adv.costs()
    assert all(c.has_pinned for c in costs)
    v = verdict(costs, adv.iterations)
    assert v.choice == "pinned", v.reason
    # by hand: 0.75 * (44 - 39) + 0.25 * (66 - 58) = 5.75 ms per iteration against off
    assert v.pinned_vs_off[0] == pytest.approx(5.75)
    assert v.pinned_vs_on[0] == pytest.approx(0.75 * 1 + 0.25 * 2)
    assert v.total_pinned_ms < min(v.total_on_ms, v.total_off_ms)
    text = render_advice(adv)
    assert "== verdict for 5000 iterations: PIN the plan file (cudnn_explorer.pin)" in text
    assert "vs off [95% CI]" in text and "; pinned: " in text
    assert "steady saving pinned: +5.75 ms per iteration against benchmark off" in text
    assert "not pinned" not in text  # every call ran pinned
    assert max(len(line) for line in text.splitlines()) <= 120
    back = Advice.from_json(adv.to_json())
    assert back.plans == "r.plans.json" and render_advice(back) == text


def test_the_predicted_gain_is_compared_per_iteration_only_at_equal_shares():
    """A plan file's prediction sums its entries over one iteration at each size: compared
    with the steady step as a mean per iteration only when the sizes share equally."""
    from cudnn_explorer.report.advice import _predicted_lines

    sizes = [pinned(320, 620.0, 39.0, 3 * 2**30), pinned(416, 720.0, 58.0, 4 * 2**30)]
    unequal = with_pinned(advice(), sizes, predicted=1.5).costs()
    assert [c.share for c in unequal] == [0.75, 0.25]
    def said(*args):
        return " ".join(" ".join(_predicted_lines(*args)).split())

    text = said(1.5, unequal, 1.25)
    assert "predicted 1.500 ms over one iteration at each of the 2 sizes" in text
    assert "unequal shares" in text and "realised" not in text
    equal = [replace(c, share=0.5) for c in unequal]
    assert all(isinstance(c, ShapeCost) for c in equal)
    text = said(1.5, equal, 0.6)
    assert ("predicted 1.500 ms over one iteration at each of the 2 sizes, 0.750 ms per "
            "iteration at their equal shares") in text and "realised +0.600 ms (80%;" in text
    text = said(0.2, equal[:1], 0.15)
    assert "predicted 0.200 ms per iteration" in text and "(75%;" in text
    assert _predicted_lines(None, equal, 0.6) == []


def test_a_slower_pinned_mode_is_not_chosen_and_the_reason_says_why():
    adv = with_pinned(advice(), [pinned(320, 620.0, 45.0, 3 * 2**30),
                                 pinned(416, 720.0, 67.0, 4 * 2**30)])
    v = verdict(adv.costs(), adv.iterations)
    assert v.choice == "on"
    assert "pinned to the plan file, it is slower in steady state than benchmark off" in \
        v.reason and "and benchmark on" in v.reason


def test_an_uncovered_size_is_counted_and_a_size_without_a_pinned_run_is_not_weighed():
    """The file covers 320 but not 416: at 416 most calls fell back (they ran with the
    user's benchmark setting), and the report counts them; a pinned run that stopped
    before a size leaves the pinned mode out of the verdict."""
    adv = with_pinned(advice(), [pinned(320, 620.0, 39.0, 3 * 2**30),
                                 pinned(416, 4100.0, 61.0, 8 * 2**30, pinned_calls=10,
                                        fallback_calls=90)], uncovered="on")
    text = render_advice(adv)
    assert "pinned, size 416: 90 of 100 convolution calls of the first iteration not " \
           "pinned" in text and "they ran with benchmark on" in text
    assert "pinned, size 320" not in text
    short = with_pinned(advice(), [pinned(320, 620.0, 39.0, 3 * 2**30)])
    v = verdict(short.costs(), short.iterations)
    assert v.total_pinned_ms is None and v.choice == "on"
    assert "pinned: no steady time at size 416; not weighed" in render_advice(short)


@pytest.mark.parametrize("args,match", [
    (["--uncovered", "on"], "--uncovered needs --plans"),
    (["--allow-environment"], "--allow-environment needs --plans"),
    (["--plans", "/nonexistent/r.plans.json"], "plan file '/nonexistent/r.plans.json'"),
    (["MODEL", "--plans", "p.json", "--no-pytorch"], "--plans adds the pinned mode"),
    (["MODEL", "--plans", "p.json", "--capture-only"], "--plans adds the pinned mode"),
    (["MODEL", "--uncovered", "on"], "--uncovered needs --plans"),
    (["MODEL", "--plans", "/nonexistent/r.plans.json"], "plan file '/nonexistent/r.plans.json'"),
])
def test_advise_and_model_plans_flags_refuse_bad_input_in_one_line(args, match):
    verb = "model" if args[:1] == ["MODEL"] else "advise"
    r = run_cli(verb, "resnet50", *[x for x in args if x != "MODEL"])
    assert r.returncode == 2, r.stderr
    assert match in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
