"""scripts/round_stats.py: the batched round's GPU time, and the figures Note [round
budgets] and Note [cut launches] (core/staging.py) quote, from the reference H100 sweep
they came from (no GPU)."""
import os
import subprocess
import sys
from dataclasses import replace

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import round_stats  # noqa: E402

H100 = os.path.join(ROOT, "data", "reference", "h100-resnet50-b32-amp-fp16-nhwc.json.gz")
BF16_QUICK = os.path.join(ROOT, "data", "reference", "h100-readme-bf16-nhwc-quick.json")
H200_UNSTAGED = os.path.join(ROOT, "data", "reference", "h200-resnet50-b32-amp-fp16-nhwc.json.gz")
H200 = os.path.join(ROOT, "data", "reference", "h200-resnet50-b32-amp-fp16-nhwc-staged.json.gz")


def test_a_batched_round_launches_the_estimate_the_warm_up_and_five_samples_at_least():
    # 0.026 ms launches, samples of 0.2 ms: K = 8 (0.208 ms a sample), three warm-up
    # replays for 0.5 ms, five samples for a 1 ms budget, after the estimate's three launches
    assert round_stats.round_gpu_ms(0.026, 0.2, 0.5, 1.0) == pytest.approx(0.026 * (3 + 8 * 8))
    # a launch longer than the sample: one launch a sample, one warm-up, five samples
    assert round_stats.round_gpu_ms(2.0, 0.1, 0.2, 0.5) == pytest.approx(2.0 * (3 + 1 + 5))
    # a budget that holds more than five samples
    assert round_stats.round_gpu_ms(0.5, 0.5, 1.0, 4.0) == pytest.approx(0.5 * (3 + 2 + 8))


def test_the_notes_figures_come_from_the_reference_sweep():
    from cudnn_explorer.core.documents import saved_explorations

    xs = saved_explorations(H100, "FILE")
    lines = round_stats.stats(xs, False, [(0.2, 0.5, 1.0), (0.1, 0.2, 0.5)],
                              [(0.5, 1.0, 4.0), (0.5, 0.5, 2.5)])
    text = "\n".join(lines)
    assert lines[0] == ("engine configs of 68 directions: 2957 timed in round 1 (90 cut "
                        "after two launches), 903 in round 2")
    assert ("round 1: 1964 left uncut; spread p50 0.21%, p95 1.08%, p99 2.47%; nearest to "
            "staying at 1.304x the best") in text
    assert ("round 2: 557 left uncut; spread p50 0.37%, p95 1.05%, p99 1.58%; nearest to "
            "staying at 1.082x the best") in text
    assert "a 1 ms budget: about 5.55 s" in text and "a 0.5 ms budget: about 3.04 s" in text
    assert "a 4 ms budget: about 4.71 s" in text and "a 2.5 ms budget: about 2.87 s" in text
    assert "round 1's cut candidates: 90, their launches 2.39 s (the second ones 1.18 s)" \
        in text
    assert ("first launches of the 1964 that left round 1 uncut: 0.48 s, each its median plus "
            "0.038 ms (p50), 1.194 ms (p99), 63.928 ms (max); 47 launched first above their "
            "direction's cutoff with a median below it") in text
    assert "ConvFwd_eng62_k2=4_k13=1_k18=0_k25=1_k27=5_k28=1: first launch 63.94 ms" in text


def test_the_h200_sweep_cut_on_first_launches_alone_and_cut_none_whose_median_stayed():
    # docs/benchmarks.md ("Where a search's time goes") quotes these from the H200's sweep
    from cudnn_explorer.core.documents import saved_explorations

    lines = round_stats.stats(saved_explorations(H200, "FILE"), False, [(0.1, 0.2, 0.5)],
                              [(0.5, 0.5, 2.5)])
    text = "\n".join(lines)
    assert lines[0] == ("engine configs of 68 directions: 2957 timed in round 1 (0 cut after "
                        "two launches, 90 after one), 742 in round 2")
    assert "round 1's cut candidates: 90, their launches 1.13 s (the second ones 0.00 s; " \
           "90 cut after the first alone)" in text
    assert "26 launched first above their direction's cutoff with a median below it" in text


def test_the_plan_builds_figures_come_from_the_reference_files():
    from cudnn_explorer.core.documents import saved_explorations

    # the README's bfloat16 problem, quick profile: its engine time is run-time compiled
    # builds of configs that every round sent away (docs/benchmarks.md, "Where a search's time
    # goes")
    lines = round_stats.builds(saved_explorations(BF16_QUICK, "FILE"))
    assert lines[:3] == [
        "plan builds: 293 engine configs built in 39.1 s",
        "run-time compiled configs: 34 built in 39.1 s (44 to 2312 ms each); 0 of 3 "
        "directions' best configs are run-time compiled",
        "  left in round 1: 34, built in 39.1 s at 1.56x to 273.78x the best"]
    assert lines[4] == ("  ConvBwdFilter_eng69: 2312 ms (run-time compiled), round 1 at 58.49x "
                        "the best")
    assert len(lines) == 4 + 5
    # the H100 sweep: run-time compiled configs left in every round, and won two directions
    lines = round_stats.builds(saved_explorations(H100, "FILE"), slowest=1)
    assert lines == [
        "plan builds: 2957 engine configs built in 3.0 s",
        "run-time compiled configs: 61 built in 2.9 s (27 to 175 ms each); 2 of 68 "
        "directions' best configs are run-time compiled",
        "  left in round 1: 36, built in 1.8 s at 1.38x to 16.37x the best",
        "  left in round 2: 12, built in 0.5 s at 1.09x to 1.27x the best",
        "  finalists: 13, built in 0.6 s",
        "the 1 slowest builds:",
        "  ConvBwdFilter_eng19_k2=0: 175 ms (run-time compiled), round 1 at 16.37x the best"]


def test_plan_builds_of_a_file_without_builds_or_run_time_compiled_configs():
    from cudnn_explorer.core.exploration import Exploration

    with open(BF16_QUICK, "rb") as f:
        x = Exploration.from_json(f.read())
    e = x.directions[0].engines
    plain = [replace(c, behavior_notes=[n for n in c.behavior_notes if n != round_stats.RTC])
             for c in e.configs]
    d = replace(x.directions[0], engines=replace(e, configs=plain))
    lines = round_stats.builds([replace(x, directions=[d])], slowest=0)
    assert lines[1:] == ["run-time compiled configs: none built"]
    unbuilt = replace(e, configs=[replace(c, build_ms=None) for c in e.configs])
    d = replace(x.directions[0], engines=unbuilt)
    assert round_stats.builds([replace(x, directions=[d])]) == ["plan builds: none recorded"]


def test_the_command_line_reads_any_saved_file_and_refuses_bad_input():
    run = [sys.executable, os.path.join(ROOT, "scripts", "round_stats.py")]
    p = subprocess.run(run + [H200_UNSTAGED], capture_output=True, text=True)
    assert p.returncode == 0
    assert p.stdout.startswith("engine configs of 68 directions: no rounds recorded (not a "
                               "staged search)\nplan builds: 2957 engine configs built in 2.5 s")
    assert "  in an unstaged search: 61, built in 2.4 s\n" in p.stdout
    p = subprocess.run(run + [H100, "--legacy"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("legacy rows of 68 directions")
    p = subprocess.run(run + ["/no/such/file.json"], capture_output=True, text=True)
    assert p.returncode == 2 and "No such file" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(run + [H100, "--round1", "0.1,x"], capture_output=True, text=True)
    assert p.returncode == 2 and "SAMPLE_MS,WARMUP_MS,BUDGET_MS" in p.stderr
    for bad in ("nan,0.2,0.5", "0.1,inf,0.5", "0.1,0.2,0", "0.1,0.2"):
        p = subprocess.run(run + [H100, "--round2", bad], capture_output=True, text=True)
        assert p.returncode == 2 and repr(bad) in p.stderr and "Traceback" not in p.stderr
