"""PyTorch's choice: log parsers on real H200 logs, child-process failures, verdicts."""
import json
import os
import textwrap
from dataclasses import replace

import pytest

from cudnn_explorer.core import logs
from cudnn_explorer.core.errors import ChildError
from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.measure import pytorch_picks as children
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.child_records import ProblemChildResult
from cudnn_explorer.core.records import MIB, AlgoResult
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.report.pytorch import pareto_frontier, render_pytorch, verdicts

from fakes import exploration, timing

FIX = os.path.join(os.path.dirname(__file__), "fixtures")


def fixture(name):
    with open(os.path.join(FIX, name), errors="replace") as f:
        return f.read()


# ----------------------------------------------------------------------------- tags
def test_tag_round_trip_and_errors():
    t = logs.parse_tag("ConvFwd_eng46_k2=4_k5=2_k14=3")
    assert (t.operation, t.engine, t.knobs) == ("ConvFwd", 46, ((2, 4), (5, 2), (14, 3)))
    assert t.direction == "fwd" and str(t) == "ConvFwd_eng46_k2=4_k5=2_k14=3"
    assert logs.parse_tag("ConvBwdData_eng1").knobs == ()
    assert logs.parse_tag("ConvFwd_eng41_k2=0_k12=-1_k13=2").knobs[1] == (12, -1)
    for bad in ("ConvFwd_", "Matmul_eng1", "ConvFwd_eng4_k2", "eng46"):
        with pytest.raises(ValueError, match="not an engine config tag"):
            logs.parse_tag(bad)


# ----------------------------------------------------------------------------- frontend log
def test_benchmark_log_default_problem():
    s = logs.parse_frontend_log(fixture("default_benchmark.fe.log"))
    assert [x.direction for x in s] == ["fwd", "bwd-data", "bwd-filter"]
    fwd = s[0]
    assert (fwd.heuristic_count, fwd.fallback_count, len(fwd.candidates)) == (33, 6, 39)
    assert [c.source for c in fwd.candidates].count("fallback") == 6
    assert len(fwd.timed) == 10 and fwd.benchmarked
    assert fwd.timed[0] == ("ConvFwd_eng70_k2=4_k18=0", pytest.approx(0.346304))
    assert fwd.winner == "ConvFwd_eng70_k2=4_k18=0"  # fastest of the ten
    assert fwd.winner == min(fwd.timed, key=lambda t: t[1])[0]
    big = fwd.largest_workspace()
    assert big.tag == "ConvFwd_eng3_k11=2" and big.numeric_notes == ["FFT"]
    assert big.workspace_bytes == 1082137344 and big.status == "CUDNN_STATUS_SUCCESS"
    eng38 = fwd.candidate("ConvFwd_eng38_k2=0_k13=2_k14=3_k18=1_k22=2_k23=0")
    assert eng38.numeric_notes == ["TENSOR_CORE"] and eng38.workspace_bytes == 25699344
    assert s[1].winner == "ConvBwdData_eng25_k2=2_k3=0"
    assert not s[1].candidate(s[1].winner).deterministic  # NONDETERMINISTIC note


def test_benchmark_log_fp16_has_runtime_compiled_candidates():
    s = logs.parse_frontend_log(fixture("r50fp16_benchmark.fe.log"))
    assert [len(x.candidates) for x in s] == [44, 44, 44]
    notes = {n for x in s for c in x.candidates for n in c.behavior_notes}
    assert "RUNTIME_COMPILATION" in notes
    assert s[0].winner == "ConvFwd_eng62_k2=1_k13=1_k18=0_k25=1_k27=7_k28=1"


def test_heuristic_and_deterministic_logs():
    h = logs.parse_frontend_log(fixture("default_heuristic.fe.log"))
    assert [x.benchmarked for x in h] == [False] * 3
    assert [x.winner for x in h] == ["ConvFwd_eng70_k2=4_k18=0", "ConvBwdData_eng25_k2=2_k3=0",
                                     "ConvBwdFilter_eng20_k2=6_k3=0"]
    d = logs.parse_frontend_log(fixture("default_deterministic.fe.log"))
    assert d[1].heuristic_count == 31  # one fewer: the nondeterministic config is filtered
    w = d[1].candidate(d[1].winner)
    assert w.tag.startswith("ConvBwdData_eng71") and w.deterministic


def test_failed_plans_are_not_winners():
    text = textwrap.dedent("""\
        Tag: ConvFwd_
        [cudnn_frontend] Called engine config generator and produced 2 configs.
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvFwd_eng1_k2=1, numeric_notes:[] behavior_notes:[] workSpaceSize: 0
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvFwd_eng2, numeric_notes:[] behavior_notes:[] workSpaceSize: 8
        [cudnn_frontend] Plan ConvFwd_eng1_k2=1 failed with CUDNN_STATUS_EXECUTION_FAILED
        [cudnn_frontend] Plan ConvFwd_eng2 took   0.5
        """)
    s, = logs.parse_frontend_log(text)
    assert s.failed == [("ConvFwd_eng1_k2=1", "CUDNN_STATUS_EXECUTION_FAILED")]
    assert s.winner == "ConvFwd_eng2"
    assert logs.parse_frontend_log("garbage\nlines\n") == []


def test_of_plans_timed_alike_the_first_timed_wins():
    """Note [tied plans]: cudnn-frontend's time-sorted set keeps the first of plans with
    the same time, whatever their tags' order; a failed plan never wins a tie."""
    text = textwrap.dedent("""\
        Tag: ConvBwdData_
        [cudnn_frontend] Called engine config generator and produced 4 configs.
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvBwdData_eng9_k2=1, numeric_notes:[] behavior_notes:[] workSpaceSize: 0
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvBwdData_eng67_k2=5, numeric_notes:[] behavior_notes:[] workSpaceSize: 0
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvBwdData_eng28_k2=4, numeric_notes:[] behavior_notes:[] workSpaceSize: 8
        [cudnn_frontend] CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR : ConvBwdData_eng1, numeric_notes:[] behavior_notes:[] workSpaceSize: 8
        [cudnn_frontend] Plan ConvBwdData_eng9_k2=1 failed with CUDNN_STATUS_EXECUTION_FAILED
        [cudnn_frontend] Plan ConvBwdData_eng67_k2=5 took   0.010016
        [cudnn_frontend] Plan ConvBwdData_eng28_k2=4 took   0.010016
        [cudnn_frontend] Plan ConvBwdData_eng1 took   0.010048
        """)
    s, = logs.parse_frontend_log(text)
    assert s.tied == ["ConvBwdData_eng67_k2=5", "ConvBwdData_eng28_k2=4"]
    assert s.winner == "ConvBwdData_eng67_k2=5"  # not the smaller tag, eng28
    one = text.replace("eng28_k2=4 took   0.010016", "eng28_k2=4 took   0.009984")
    s, = logs.parse_frontend_log(one)
    assert s.tied == ["ConvBwdData_eng28_k2=4"] and s.winner == "ConvBwdData_eng28_k2=4"
    # the failed plan's time, were it logged too, never counts
    bad = text.replace("Plan ConvBwdData_eng1 took   0.010048",
                       "Plan ConvBwdData_eng9_k2=1 took   0.001")
    s, = logs.parse_frontend_log(bad)
    assert s.winner == "ConvBwdData_eng67_k2=5"


# ----------------------------------------------------------------------------- API log
def test_api_log_names_the_legacy_algorithms():
    calls = logs.parse_api_log(fixture("legacy_api_default.log"))
    got = {d: logs.legacy_choice(calls, d) for d in ("fwd", "bwd-data", "bwd-filter")}
    assert (got["fwd"].algo_name, got["fwd"].math_type) == ("IMPLICIT_PRECOMP_GEMM",
                                                           "DEFAULT_MATH")
    assert got["bwd-data"].algo_name == "ALGO_0" and got["bwd-filter"].algo == 0
    assert got["bwd-filter"].workspace_bytes == 1543897088
    assert logs.legacy_choice([], "fwd") is None


# ----------------------------------------------------------------------------- picks
def _legacy_rows(result_file):
    """Legacy rows whose kernels are those the child saw, to exercise matching."""
    res = json.loads(fixture(result_file))
    rows = {}
    for d in res["directions"]:
        r = AlgoResult(1 if d["direction"] == "fwd" else 0,
                       "IMPLICIT_PRECOMP_GEMM" if d["direction"] == "fwd" else "ALGO_0",
                       "DEFAULT_MATH", "CUDNN_STATUS_SUCCESS", 0, 0.5, 0, True,
                       timing=timing(0.33), kernels=list(d["kernels"]))
        rows[d["direction"]] = [r]
    return rows


def _picks(mode_file, log_file, spec, rows=None):
    """One pick per direction of a saved H200 child result and its log, built once."""
    res = json.loads(fixture(mode_file))
    res["log_text"] = fixture(log_file)
    run = children.ModeRun(spec, ProblemChildResult.read(res, mode_file))
    return [children.pick_of(run, x["direction"], (rows or {}).get(x["direction"], []))
            for x in res["directions"]]


def test_picks_from_engine_log_and_child_result():
    rows = _legacy_rows("default_benchmark.result.json")
    spec = children.ModeSpec("benchmark", "benchmark")
    fwd, bwd_d, bwd_f = _picks("default_benchmark.result.json", "default_benchmark.fe.log",
                               spec, rows)
    assert fwd.engine_tag == "ConvFwd_eng70_k2=4_k18=0" and fwd.plan_workspace_bytes == 0
    assert fwd.benchmark_limit == 10 and len(fwd.timed) == 10 and len(fwd.candidates) == 39
    assert fwd.first_peak_alloc_bytes == pytest.approx(1424 * MIB, abs=MIB)
    assert fwd.deterministic is True
    assert fwd.same_kernels_as == ["IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)"]
    assert fwd.largest_candidate()["tag"] == "ConvFwd_eng3_k11=2"
    assert bwd_d.deterministic is False and bwd_d.steady.median_ms > 0


def test_picks_from_legacy_api_log():
    spec = children.ModeSpec("legacy", "benchmark", legacy=True)
    fwd, bwd_d, bwd_f = _picks("default_benchmark_legacy.result.json",
                               "legacy_api_default.log", spec)
    assert fwd.legacy_algo == "IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)" and fwd.api == "legacy"
    assert bwd_f.legacy_algo == "ALGO_0 (DEFAULT_MATH)"


def test_verdicts_and_table_explain_benchmark_memory():
    rows = _legacy_rows("default_benchmark.result.json")
    e = exploration()
    d = e.directions[0]
    d.find = rows["fwd"]
    d.pytorch = (_picks("default_benchmark.result.json", "default_benchmark.fe.log",
                        children.ModeSpec("benchmark", "benchmark"), rows)[:1]
                 + _picks("default_heuristic.result.json", "default_heuristic.fe.log",
                          children.ModeSpec("heuristics", "heuristic"), rows)[:1])
    v = "\n".join(verdicts(d))
    # 1424 MiB (benchmark) - 392 MiB (heuristics) = 1032 MiB = the FFT candidate's workspace
    assert "extra first-call peak (1032 MiB) matches the largest candidate workspace, " \
           "ConvFwd_eng3_k11=2 [FFT] at 1032 MiB, a plan that was never timed" in v
    assert "benchmark mode found nothing faster than the heuristic pick" in v
    assert "runs the same kernels as IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)" in v
    text = render_pytorch(d)
    assert "benchmark: ConvFwd_eng70_k2=4_k18=0, the fastest of 10 timed of 39 candidates" \
        in text
    assert "best legacy (ours)" in text and max(len(ln) for ln in text.splitlines()) <= 120
    back = Exploration.from_json(e.to_json())
    assert back.directions[0].pytorch == d.pytorch


def test_pareto_frontier():
    rows = [AlgoResult(i, n, "DEFAULT_MATH", "CUDNN_STATUS_SUCCESS", 0, t, ws, True,
                       timing=timing(t)) for i, (n, t, ws) in
            enumerate([("A", 0.5, 0), ("B", 0.4, 10), ("C", 0.45, 20), ("D", 0.3, 30)])]
    assert [r.algo_name for r in pareto_frontier(rows)] == ["A", "B", "D"]
    e = exploration()
    e.directions[0].find = rows
    v = verdicts(e.directions[0])
    assert "a workspace cap below 0.00 MiB costs" not in " ".join(v)
    # a workspace under 0.01 MiB in exact bytes: a cap one can set
    assert "a workspace cap below 10 bytes costs +67% (best then: A (DEFAULT_MATH), 0.5000 ms)" in v
    assert "a workspace cap below 30 bytes costs +33% (best then: B (DEFAULT_MATH), 0.4000 ms)" in v
    rows[3] = replace(rows[3], workspace_bytes=3 * MIB)
    v = verdicts(e.directions[0])
    assert "a workspace cap below 3.00 MiB costs +33% (best then: B (DEFAULT_MATH), 0.4000 ms)" in v


# ----------------------------------------------------------------------------- children
CHILDREN = {
    "crash": "import os\nos.abort()\n",
    "hang": "import time\ntime.sleep(60)\n",
    "boom": "raise RuntimeError('boom in the child')\n",
    "nolog": textwrap.dedent("""\
        import json, sys
        json.dump({"directions": [], "settings": {}}, open(sys.argv[2], "w"))
        """),
    # records its pid and the other children of its parent waiting in measure/prestart.py
    "ahead": textwrap.dedent("""\
        import os, sys
        me, parent, waiting = os.getpid(), os.getppid(), []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
                cmd = open(f"/proc/{pid}/cmdline").read().split("\\0")
            except OSError:
                continue
            if int(pid) != me and int(stat[1]) == parent and "fakechild_ahead" in cmd:
                waiting.append(int(pid))
        with open(os.environ["AHEAD_LOG"], "a") as f:
            f.write(f"{me} {' '.join(map(str, waiting))}\\n")
        raise SystemExit(3)
        """),
}


@pytest.fixture
def fake_children(tmp_path, monkeypatch):
    for name, code in CHILDREN.items():
        (tmp_path / f"fakechild_{name}.py").write_text(code)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("name,match", [
    ("crash", r"failed \(killed by SIGABRT\)"),
    ("boom", r"failed \(exit code 1\): RuntimeError: boom in the child"),
    ("hang", r"did not finish within 2 s and was killed"),
    ("nolog", r"wrote no cudnn-frontend log"),
])
def test_child_failures_are_clear_errors(fake_children, name, match):
    p = ConvProblem.create("1,3,8,8")
    spec = children.ModeSpec("benchmark", "benchmark")
    with pytest.raises(ChildError, match=match):
        children.run_child(p, spec, ExploreOptions.create(directions="fwd", child_timeout_s=2),
                           child_module=f"fakechild_{name}")


def test_failed_mode_keeps_the_others(fake_children):
    p = ConvProblem.create("1,3,8,8")
    runs = children.run_children(p, ExploreOptions.create(directions="fwd,bwd-data",
                                                           child_timeout_s=5),
                                 child_module="fakechild_boom")
    assert [r.spec.label for r in runs] == [m.label for m in children.default_modes()]
    picks = [children.pick_of(r, "bwd-data") for r in runs]
    assert all("boom in the child" in x.error and not x.ok for x in picks)


def test_each_mode_runs_in_its_own_process_every_one_started_ahead(fake_children,
                                                                    monkeypatch):
    """Note [children started ahead]: while one mode runs, every later mode's process is
    already started (waiting); every mode has a process of its own, and none is left."""
    log = fake_children / "ahead.log"
    monkeypatch.setenv("AHEAD_LOG", str(log))
    p = ConvProblem.create("1,3,8,8")
    runs = children.run_children(p, ExploreOptions.create(directions="fwd", child_timeout_s=30),
                                 child_module="fakechild_ahead")
    assert all("exit code 3" in r.error for r in runs)
    seen = [[int(x) for x in ln.split()] for ln in log.read_text().splitlines()]
    assert len(seen) == len(children.default_modes())
    pids = [s[0] for s in seen]
    assert len(set(pids)) == len(pids)  # a fresh process per mode
    for i, (_, *waiting) in enumerate(seen):  # the later ones wait while this one runs
        assert sorted(waiting) == sorted(pids[i + 1:]), (i, seen)
    for pid in pids:
        assert not os.path.exists(f"/proc/{pid}") or "zombie" not in open(
            f"/proc/{pid}/status").read()  # reaped


def test_default_modes():
    labels = [m.label for m in children.default_modes()]
    assert labels[0] == "benchmark" and "benchmark, limit 0 (all)" in labels
    assert any(m.legacy for m in children.default_modes())
    assert [m.label for m in children.default_modes(0)][0] == "benchmark, limit 0"
    assert len(children.default_modes(0)) == 4


def test_legacy_pick_matches_kernels_and_determinism():
    rows = _legacy_rows("default_benchmark_legacy.result.json")
    spec = children.ModeSpec("legacy", "benchmark", legacy=True)
    alone = _picks("default_benchmark_legacy.result.json", "legacy_api_default.log", spec)
    assert alone[0].same_kernels_as == [] and alone[0].deterministic is None
    picks = _picks("default_benchmark_legacy.result.json", "legacy_api_default.log", spec, rows)
    assert picks[0].same_kernels_as == ["IMPLICIT_PRECOMP_GEMM (DEFAULT_MATH)"]
    assert picks[0].deterministic is True


def test_children_started_earlier_are_the_ones_that_run(fake_children, monkeypatch):
    log = fake_children / "ahead.log"
    monkeypatch.setenv("AHEAD_LOG", str(log))
    p = ConvProblem.create("1,3,8,8")
    options = ExploreOptions.create(directions="fwd", child_timeout_s=30)
    started = children.start_children(p, options, child_module="fakechild_ahead")
    assert len(started) == len(children.default_modes())
    pids = [c.proc.pid for c in started]
    children.run_children(p, options, child_module="fakechild_ahead", ahead=started)
    assert [int(ln.split()[0]) for ln in log.read_text().splitlines()] == pids


def test_a_bench_closed_before_its_children_ran_ends_them(fake_children, monkeypatch):
    from cudnn_explorer.measure import pipeline

    monkeypatch.setattr(pipeline, "start_children", lambda p, o: children.start_children(
        p, o, child_module="fakechild_ahead"))
    bench = pipeline.GpuBench(0)
    bench.prestart(ConvProblem.create("1,3,8,8"),
                   ExploreOptions.create(directions="fwd", engines=False))
    procs = [c.proc for c in bench._children]
    assert len(procs) == len(children.default_modes()) and all(
        proc.poll() is None for proc in procs)
    bench.close()
    assert all(proc.poll() is not None for proc in procs) and bench._children == []


def test_a_model_bench_starts_no_problem_children(monkeypatch):
    """A model's problems take PyTorch's picks from the model's own run: its bench starts
    the engine worker ahead, and no child per mode."""
    from cudnn_explorer.measure import pipeline
    from cudnn_explorer.model.run_modes import ModelBench

    started = []
    monkeypatch.setattr(pipeline, "start_children", lambda p, o: started.append(p) or [])
    monkeypatch.setattr(pipeline.EngineWorker, "start", lambda self: started.append("worker"))
    bench = ModelBench(0, {})
    bench.prestart(ConvProblem.create("1,3,8,8"), ExploreOptions.create(directions="fwd"))
    assert started == ["worker"]
    bench.close()
