"""The benchmark suite without a GPU: the harness (turns, repeats, places, medians,
spreads, ratios, the environment stamp), the renderer, and each benchmark's cases, the
figures it reads from a run's file and the JSON it writes, with a fake runner."""
import json
import os
import re
import subprocess
import sys
import time

import pytest

from benchmarks import (cold_start, harness, main_job, memory, model_sweep, pin_host,
                        pinned_step, render, search)
from benchmarks.harness import Case, Figure

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {"gpu": "NVIDIA H200", "gpus": 1, "driver": "580.159.04", "torch": "2.11.0+cu130",
       "cudnn": "9.19.0", "cudnn_frontend": "1.32.0", "package": "0.2.0", "commit": "",
       "command": "python -m benchmarks.x", "date": "2026-01-01 00:00 UTC"}


def fake_runner(values):
    """A runner that records each call and answers figures from ``values(case, n)``."""
    calls = []

    def run(case, places):
        calls.append((case.row, case.mode, dict(places)))
        return values(case, len(calls))
    run.calls = calls
    return run


def test_measure_runs_cases_in_turns_reversed_every_other_repeat_after_warmup():
    cases = [Case("r", m, ("-c", "pass")) for m in ("a", "b", "c")]
    run = fake_runner(lambda case, n: {"wall_s": float(n)})
    samples = harness.measure(cases, repeats=3, runner=run, warmup=1)
    assert [m for _, m, _ in run.calls] == ["c", "b", "a", "a", "b", "c", "c", "b", "a",
                                            "a", "b", "c"]
    # the warm-up round (calls 1-3) is dropped; each run notes its repeat
    assert samples[("r", "a")] == [{"wall_s": 4.0, "repeat": 0}, {"wall_s": 9.0, "repeat": 1},
                                   {"wall_s": 10.0, "repeat": 2}]


def test_places_are_fresh_per_run_and_round_shared_within_a_repeat():
    cases = [Case("r", m, ()) for m in ("a", "b")]
    run = fake_runner(lambda case, n: {})
    harness.measure(cases, repeats=2, runner=run)
    places = [p for _, _, p in run.calls]
    assert len({p["tmp"] for p in places}) == 4 and len({p["out"] for p in places}) == 4
    assert places[0]["round"] == places[1]["round"] != places[2]["round"] == places[3]["round"]
    with pytest.raises(ValueError):
        harness.measure(cases, repeats=0, runner=run)


def test_run_process_fills_places_and_reads_the_out_file(tmp_path):
    code = ("import json, os, sys; json.dump({'x': 2.5, 'flag': True, 'name': 'n', "
            "'cache': len(os.environ['CE_T'])}, open(sys.argv[1], 'w')); sys.exit(3)")
    case = Case("r", "m", ("-c", code, "{out}"), env=(("CE_T", "{tmp}"),))
    places = {"out": str(tmp_path / "o.json"), "tmp": "abcd", "round": ""}
    figures = harness.run_process(case, places)
    assert figures["rc"] == 3.0 and figures["x"] == 2.5 and figures["cache"] == 4.0
    assert "flag" not in figures and "name" not in figures and figures["wall_s"] > 0
    custom = harness.run_process(Case("r", "m", case.argv, case.env,
                                      read=lambda p, w: {"w": w}), places)
    assert custom["w"] == custom["wall_s"]


def test_compile_sources_writes_bytecode_even_where_python_is_told_not_to(tmp_path,
                                                                         monkeypatch):
    import importlib.util

    from benchmarks import harness

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "mod.py").write_text("X = 1\n")
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    harness.compile_sources([str(tmp_path / "pkg"), str(tmp_path / "missing")])
    assert os.path.exists(importlib.util.cache_from_source(str(tmp_path / "pkg" / "mod.py")))


def test_spread_is_iqr_from_four_samples_and_range_below():
    assert harness.spread([1.0]) is None
    assert harness.spread([9.0, 10.0, 12.0]) == pytest.approx(0.3)
    assert harness.spread([1.0, 2.0, 3.0, 4.0, 100.0]) == pytest.approx((4.0 - 2.0) / 3.0)


def doc_of(samples, figures, baseline="a"):
    return harness.result("t", "q?", samples, figures, baseline=baseline, env=ENV)


def test_result_has_medians_spreads_ratios_and_the_environment():
    samples = {("r", "a"): [{"t": 10.0}, {"t": 12.0}], ("r", "b"): [{"t": 5.0}, {"t": 5.5}]}
    doc = doc_of(samples, [Figure("t", "time", "s")])
    a, b = doc["cells"]
    assert (a["median"], b["median"]) == (11.0, 5.25)
    assert a["spread"] == pytest.approx(2 / 11)
    assert doc["ratios"] == [{"row": "r", "figure": "t", "mode": "b", "baseline": "a",
                              "ratio": pytest.approx(5.25 / 11)}]
    assert doc["environment"] == ENV and doc["repeats"] == 2
    assert json.loads(json.dumps(doc)) == doc


def test_render_marks_the_best_the_noisy_and_gives_ratios():
    samples = {("r", "a"): [{"t": 10.0}, {"t": 12.0}], ("r", "b"): [{"t": 5.0}, {"t": 5.0}]}
    table = render.render(doc_of(samples, [Figure("t", "time", "s")]))
    assert table.splitlines() == ["| figure | a | b | b / a |", "| --- | --- | --- | --- |",
                                  "| time (s) | 11.0 ±18% (noisy) | **5.00** ±0% | 0.455 |"]
    higher = render.render(doc_of(samples, [Figure("t", "rate", "/s", better="higher")]))
    assert "**11.0**" in higher and "**5.00**" not in higher


def test_render_numbers_and_a_case_column_for_several_rows():
    assert [render.number(v) for v in (10303.0, 46.52, 3.591, 0.00763)] == \
        ["10,303", "46.5", "3.59", "0.00763"]
    samples = {("x", "a"): [{"t": 1.0}], ("y", "a"): [{"t": 2.0}]}
    lines = render.render(doc_of(samples, [Figure("t", "time", "s")], None)).splitlines()
    assert lines[0] == "| case | figure | a |" and lines[3] == "| y | time (s) | 2.00 |"
    unitless = render.render(doc_of(samples, [Figure("t", "exit status", "")], None))
    assert unitless.splitlines()[3] == "| y | exit status | 2.00 |"


def test_the_stamp_leaves_out_where_the_result_was_written():
    doc = doc_of({("r", "a"): [{"t": 1.0}]}, [Figure("t", "time", "s")])
    for command in ("python -m benchmarks.zero_code --repeats 1 --json /tmp/x/z.json --steps 12",
                    "python -m benchmarks.zero_code --repeats 1 --json=z.json --steps 12"):
        doc["environment"] = dict(doc["environment"], command=command)
        assert render.stamp(doc).endswith("; `python -m benchmarks.zero_code --repeats 1 "
                                          "--steps 12`")


def test_render_command_and_stamp(tmp_path):
    samples = {("r", "a"): [{"t": 1.0}]}
    path = tmp_path / "r.json"
    harness.write(doc_of(samples, [Figure("t", "time", "s")]), str(path))
    r = subprocess.run([sys.executable, "-m", "benchmarks.render", str(path), "--stamp"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0
    assert r.stdout.startswith("NVIDIA H200; driver 580.159.04; torch 2.11.0+cu130; "
                               "cuDNN 9.19.0; cudnn-frontend 1.32.0")
    assert "| time (s) | 1.00 |" in r.stdout
    path.write_text(json.dumps({"schema": "other"}))
    r = subprocess.run([sys.executable, "-m", "benchmarks.render", str(path)],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 2 and "not a benchmark result" in r.stderr


def test_environment_from_the_packages_info():
    info = {"built": {"cudnn_frontend": "13200"},
            "running": {"torch": "2.11.0+cu130", "cudnn": "91900"},
            "gpus": [{"name": "NVIDIA H200"}, {"name": "NVIDIA H200"}]}
    env = harness.environment(info)
    assert (env["gpu"], env["gpus"], env["cudnn"], env["cudnn_frontend"]) == \
        ("NVIDIA H200", 2, "9.19.0", "1.32.0")
    import cudnn_explorer
    assert env["package"] == cudnn_explorer.__version__ and env["date"]


def written(module, argv, tmp_path, values):
    path = tmp_path / "result.json"
    run = fake_runner(values)
    rc = module.main(argv + ["--json", str(path)], runner=run, env=ENV)
    return rc, json.loads(path.read_text()), run.calls


def test_main_job_cold_gets_an_empty_jit_cache_and_reads_the_report(tmp_path):
    cold, warm = main_job.cases(main_job.parse([]))
    assert ("CUDA_CACHE_PATH", "{tmp}") in cold.env and warm.env == ()
    assert cold.argv[:2] == ("-m", "cudnn_explorer") and "--no-store" in cold.argv
    out = tmp_path / "e.json"
    out.write_text(json.dumps({"wall_s": 17.4, "pytorch_wall_s": 6.4}))
    assert main_job.report_times(str(out), 20.0) == {"report_wall_s": 17.4,
                                                    "pytorch_wall_s": 6.4}
    rc, doc, calls = written(main_job, ["--repeats", "2"], tmp_path,
                             lambda c, n: {"wall_s": 20.0 + n, "rc": 0.0})
    assert rc == 0 and len(calls) == 6 and doc["baseline"] == "cold"


def test_a_failed_run_makes_the_exit_status_1(tmp_path):
    rc, doc, _ = written(main_job, ["--repeats", "1"], tmp_path,
                         lambda c, n: {"wall_s": 1.0, "rc": 3.0})
    assert rc == 1 and doc["cells"]


def test_ctrl_c_writes_the_runs_that_finished_and_exits_130(tmp_path):
    def values(case, n):
        if n == 4:
            raise KeyboardInterrupt
        return {"wall_s": 10.0 + n, "rc": 0.0}
    rc, doc, calls = written(main_job, ["--repeats", "2"], tmp_path, values)
    assert rc == 130 and doc["complete"] is False and len(calls) == 4
    # calls 1-2 are the warm-up round, call 3 the one that finished
    assert [c["median"] for c in doc["cells"] if c["figure"] == "wall_s"] == [13.0]
    assert "interrupted: 1 of 4 runs finished" in doc["notes"]


def test_the_environment_is_read_before_the_first_run(tmp_path, monkeypatch, capsys):
    """A deadline's SIGINT after the last run must not lose the runs to the environment's
    read (an H200 run lost every figure that way): it comes first."""
    order = []
    monkeypatch.setattr(harness, "environment", lambda: order.append("env") or ENV)

    def values(case, n):
        order.append("run")
        if n == 3:
            raise KeyboardInterrupt
        return {"wall_s": 1.0, "rc": 0.0}
    path = tmp_path / "result.json"
    rc = main_job.main(["--repeats", "1", "--json", str(path)], runner=fake_runner(values))
    assert rc == 130 and order[0] == "env" and order.count("env") == 1
    assert json.loads(path.read_text())["environment"] == ENV

    def interrupted():
        raise KeyboardInterrupt
    monkeypatch.setattr(harness, "environment", interrupted)
    other = tmp_path / "other.json"
    assert main_job.main(["--json", str(other)], runner=fake_runner(values)) == 130
    assert not other.exists()
    assert "interrupted before the first run; nothing written" in capsys.readouterr().err


def sweep_file(tmp_path, modes):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps({"wall_s": 20.0, "pytorch_run": {"modes": modes}}))
    return str(path)


def test_model_sweep_figures_from_the_sweep_file(tmp_path):
    modes = [{"mode": "benchmark", "benchmark_limit": None, "wall_s": 10.0,
              "sizes": [{"first_ms": 8000.0, "first_peak_reserved_bytes": 2 * 2**30}]},
             {"mode": "benchmark", "benchmark_limit": 0, "wall_s": 4.0,
              "sizes": [{"first_ms": 1.0, "first_peak_reserved_bytes": 0}]},
             {"mode": "heuristic", "wall_s": 2.0, "sizes": []}]
    f = model_sweep.sweep_figures(sweep_file(tmp_path, modes), 40.0)
    assert f == {"problems_s": 20.0, "pytorch_run_s": 16.0, "own_s": 24.0,
                 "first_iteration_ms": 8000.0, "to_first_iteration": 5.0,
                 "model_reserved_gib": 2.0}
    case, = model_sweep.cases(model_sweep.parse([]))
    assert case.watch_memory and case.row == "resnet50 --batch 32 --amp fp16 --channels-last"
    assert len(model_sweep.cases(model_sweep.parse(["--profiles", "quick,thorough"]))) == 2


def exploration(tmp_path, name, configs):
    path = tmp_path / name
    path.write_text(json.dumps({"directions": [{"direction": "fwd", "engines": {"configs": [
        {"tag": t, "status": "OK", "allowed": True, "left_round": cut,
         "timing": {"median_ms": ms}} for t, ms, cut in configs]}}]}))
    return str(path)


def test_search_pairs_quick_best_with_thorough_timing(tmp_path):
    quick = search.timed_configs(exploration(tmp_path, "q.json", [
        ("a", 1.0, None), ("b", 0.5, 1), ("c", 2.0, None)]), 1.0)
    thorough = search.timed_configs(exploration(tmp_path, "t.json", [
        ("a", 1.1, None), ("b", 1.0, None), ("c", 3.0, None)]), 1.0)
    assert quick["best_ms_fwd"] == 1.0 and thorough["best_ms_fwd"] == 1.0
    samples = {("p", "quick"): [quick], ("p", "thorough"): [thorough]}
    search.pair(samples)
    assert quick["quick_in_thorough_fwd"] == pytest.approx(1.1)
    assert "quick_in_thorough_fwd" not in thorough
    with pytest.raises(SystemExit):
        search.cases(search.parse(["--problems", "nope"]))


def test_search_result_leaves_the_config_tables_out_of_the_json(tmp_path):
    def values(case, n):
        return {"wall_s": 10.0, "rc": 0.0, "best_ms_fwd": 1.0, "_medians_fwd": {"a": 1.0}}
    rc, doc, calls = written(search, ["--problems", "default", "--repeats", "1"], tmp_path,
                             values)
    assert rc == 0 and len(calls) == 2 and "_medians" not in json.dumps(doc)
    assert {c["figure"] for c in doc["cells"]} == {"wall_s", "best_ms_fwd", "quick_in_thorough_fwd"}


@pytest.mark.parametrize("module,argv,modes", [
    (pinned_step, ["--plans", "p.json"], ["off", "on", "pinned"]),
    (pin_host, ["--plans", "p.json"], ["aten", "pinned", "pinned by the hook",
                                       "recorded by the hook"]),
    (cold_start, ["--first-calls"], ["heuristic", "benchmark", "deterministic"]),
])
def test_child_benchmarks_run_their_own_module_per_mode(tmp_path, module, argv, modes):
    rc, doc, calls = written(module, argv + ["--repeats", "1"], tmp_path,
                             lambda c, n: {"rc": 0.0, "wall_s": 1.0})
    assert rc == 0 and doc["modes"] == modes and doc["baseline"] == modes[0]
    case = module.cases(module.parse(argv), "p.json") if module is not cold_start \
        else module.call_cases(module.parse(argv))
    assert case[0].argv[:4] == ("-m", module.__name__, "--child", modes[0])
    assert "{out}" in case[0].argv


def test_pin_host_hook_modes_run_under_the_hooks_variables_and_the_others_under_none():
    env = {c.mode: dict(c.env) for c in pin_host.cases(pin_host.parse([]), "/p/plans.json")}
    off = {"CUDNN_EXPLORER_PLANS": "", "CUDNN_EXPLORER_RECORD": ""}
    assert env["aten"] == off and env["pinned"] == off  # a shell's own variables unset
    assert env["pinned by the hook"] == {"CUDNN_EXPLORER_PLANS": "/p/plans.json",
                                         "CUDNN_EXPLORER_RECORD": "",
                                         "CUDNN_EXPLORER_STRICT": "", "CUDNN_EXPLORER_KEEP": "0"}
    assert env["recorded by the hook"] == {"CUDNN_EXPLORER_PLANS": "",
                                           "CUDNN_EXPLORER_RECORD": "{out}.record"}
    for mode, variables in env.items():  # what the hook reads in the child
        from cudnn_explorer.core.zero_code import settings_from
        want = {"pinned by the hook": "run", "recorded by the hook": "record"}.get(mode, "")
        assert settings_from(variables).mode == want
        assert not settings_from(variables).strict  # as pin() is by default: no per-call check


def test_cold_start_first_calls_rows_share_a_cache_within_a_repeat_or_not():
    envs = {(c.row, c.mode): dict(c.env)["CUDA_CACHE_PATH"]
            for c in cold_start.call_cases(cold_start.parse(["--first-calls"]))}
    assert envs[("empty cache", "benchmark")] == "{tmp}"
    assert envs[("shared cache", "benchmark")] == "{round}"


def test_cold_start_first_calls_options_belong_to_it_and_its_child():
    a = cold_start.parse(["--first-calls", "--kernel", "5", "--dtype", "float16"])
    assert (a.shape, a.kernel, a.out_channels, a.dtype) == ("32,3,224,224", 5, 64, "float16")
    assert a.json == cold_start.CALLS_JSON and cold_start.parse([]).json == cold_start.JSON
    case = cold_start.call_cases(a)[0]
    child = cold_start.parse(list(case.argv[2:]))  # what the child process parses
    assert child.first_calls and child.child == "heuristic" and child.kernel == 5
    for bad in (["--first-calls", "--models", "decoder-train-b8"], ["--first-calls", "--warm-jit"],
                ["--kernel", "5"], ["--shape", "1,3,8,8"]):
        with pytest.raises(SystemExit):
            cold_start.parse(bad)


def test_memory_cases():
    rows = [c.row for c in memory.cases(memory.parse(["--leave-free", "256"]))]
    assert rows[-1] == "the main job with 256 MiB free" and len(rows) == 4


def test_model_sweep_gpus_adds_the_sweep_under_torchrun_beside_a_one_gpu_sweep_with_a_store(
        tmp_path):
    one, many = model_sweep.cases(model_sweep.parse(["--gpus", "4"]))
    assert (one.mode, many.mode) == ("quick", "quick on 4 GPUs") and one.row == many.row
    assert many.argv[:6] == ("-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node", "4", "-m")
    assert many.argv[5:] == one.argv and "--profile" in many.argv
    assert "{tmp}/results.db" in one.argv and "--no-store" not in one.argv
    assert dict(one.env)["CUDA_VISIBLE_DEVICES"] == "0" and many.env == ()
    assert one.watch_memory and not many.watch_memory
    (tmp_path / "s.json").write_text(json.dumps({"entries": [{}, {}, {}]}))
    assert many.read(str(tmp_path / "s.json"), 1.0) == {"problems": 3.0}
    assert one.read(str(tmp_path / "s.json"), 1.0) == {"problems": 3.0}
    # without --gpus, or with --gpus 1, nothing changes
    assert model_sweep.cases(model_sweep.parse(["--gpus", "1"])) == \
        model_sweep.cases(model_sweep.parse([]))
    with pytest.raises(SystemExit):
        model_sweep.parse(["--gpus", "0"])
    with pytest.raises(SystemExit):  # a second profile's ratio would be to the first's
        model_sweep.parse(["--gpus", "2", "--profiles", "quick,thorough"])
    rc, doc, calls = written(model_sweep, ["--gpus", "2"], tmp_path,
                             lambda c, n: {"rc": 0.0, "wall_s": 100.0 if n == 1 else 55.0,
                                           "problems": 23.0})
    assert rc == 0 and doc["modes"] == ["quick", "quick on 2 GPUs"]
    assert doc["baseline"] == "quick" and "problems" in [f["key"] for f in doc["figures"]]
    ratio = {(r["mode"], r["figure"]): r["ratio"] for r in doc["ratios"]}
    assert ratio[("quick on 2 GPUs", "wall_s")] == pytest.approx(0.55)
    _, plain, _ = written(model_sweep, [], tmp_path, lambda c, n: {"rc": 0.0, "wall_s": 1.0})
    assert "problems" not in [f["key"] for f in plain["figures"]]


def shipped():
    folder = os.path.join(REPO, "data", "benchmarks")
    return sorted(os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".json"))


@pytest.mark.parametrize("path", shipped(), ids=os.path.basename)
def test_docs_show_the_table_a_shipped_result_renders(path):
    with open(path) as f:
        doc = json.load(f)
    with open(os.path.join(REPO, "docs", "benchmarks.md")) as f:
        docs = f.read()
    assert render.render(doc) in docs
    assert render.stamp(doc) in docs


def test_no_benchmark_edits_sys_path():
    for folder in ("benchmarks", "scripts"):
        for name in os.listdir(os.path.join(REPO, folder)):
            if name.endswith(".py"):
                with open(os.path.join(REPO, folder, name)) as f:
                    assert not re.search(r"sys\.path\.(insert|append)", f.read()), name


def test_cold_start_profile_adds_a_profiled_kept_process_and_splits_its_calls(capsys):
    from benchmarks import cold_start

    a = cold_start.parse(["--models", "decoder-train-b8", "--profile"])
    cases = cold_start.cases(a, {"decoder-train-b8": ("p.plans", "p.kept")})
    assert [c.mode for c in cases] == list(cold_start.MODES) + [cold_start.PROFILED]
    assert cases[-1].argv[3] == cold_start.PROFILED
    plain = cold_start.cases(cold_start.parse(["--models", "decoder-train-b8"]),
                             {"decoder-train-b8": ("p.plans", "p.kept")})
    assert [c.mode for c in plain] == list(cold_start.MODES)
    events = [("cudaLaunchKernel", 3_000_000.0), ("cudaLaunchKernelExC", 500.0),
              ("cuLaunchKernelEx", 500.0), ("cudaMalloc", 2_000.0), ("cudaFree", 1_000.0),
              ("cudaStreamSynchronize", 4_000.0), ("aten::convolution", 9_000.0)]
    split = cold_start.profile_split(events, top=2)
    assert split == {"launch_ms": pytest.approx(3001.0), "malloc_ms": pytest.approx(3.0),
                     "sync_ms": pytest.approx(4.0)}
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].endswith("cudaLaunchKernel") and "3,000.0 ms" in err[0]
    with pytest.raises(SystemExit):
        cold_start.parse(["--first-calls", "--profile"])


def test_cold_start_steady_step_is_the_graphs_replays_or_left_out_in_a_line(monkeypatch,
                                                                             capsys):
    from types import SimpleNamespace

    from benchmarks import cold_start
    from cudnn_explorer.measure import step_graph, timing

    timed = []
    monkeypatch.setattr(timing, "time_callable", lambda fn, spec: timed.append(
        (fn, spec)) or SimpleNamespace(median_ms=12.5))
    replay = object()
    fallback_calls = [0]

    def capture(torch, step, zero_grad, device, grow=0):
        fallback_calls[0] += grow
        return replay, ""

    def counts():
        return SimpleNamespace(fallback_calls=fallback_calls[0])

    # captured with no call fallen back: the median of its replays, as the tool times them
    monkeypatch.setattr(step_graph, "capture_step", capture)
    assert cold_start.steady_ms("torch", None, None, counts) == 12.5
    (fn, spec), = timed
    assert fn is replay and not spec.graph and spec.budget_ms == cold_start.STEADY_BUDGET_MS
    # calls fell back while the graph was made: its replays are not the plans' step
    monkeypatch.setattr(step_graph, "capture_step",
                        lambda *args: capture(*args, grow=3))
    assert cold_start.steady_ms("torch", None, None, counts) is None
    # the capture failed: why, in one line
    monkeypatch.setattr(step_graph, "capture_step",
                        lambda *args: (None, "CUDA graph capture failed (RuntimeError: x)"))
    assert cold_start.steady_ms("torch", None, None) is None
    assert len(timed) == 1
    assert capsys.readouterr().err.splitlines() == [
        "cold_start: the steady step not timed: 3 call(s) fell back to PyTorch's convolution "
        "while its graph was warmed and captured",
        "cold_start: the steady step not timed: CUDA graph capture failed (RuntimeError: x)"]
    assert "steady_ms" in {f.key for f in cold_start.FIGURES}


def test_cold_start_python_split_names_the_calls_that_took_the_time(capsys):
    import cProfile

    from benchmarks import cold_start

    def slow():
        time.sleep(0.05)

    python = cProfile.Profile()
    python.enable()
    slow()
    sum(range(10))
    python.disable()
    cold_start.python_split(python, top=2)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].endswith("<built-in method time.sleep>")
    own = float(err[0].split("(Python):")[1].split("ms own")[0].replace(",", ""))
    assert 45 <= own < 1000


def test_cold_start_python_split_by_time_in_all_puts_the_caller_first(capsys):
    import cProfile

    from benchmarks import cold_start

    def outer():
        time.sleep(0.03)
        sum(range(10))

    python = cProfile.Profile()
    python.runcall(outer)
    cold_start.python_split(python, "pin()", top=2, by="total")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and err[0].startswith("cold_start: profiled pin() (Python):")
    assert err[0].endswith(" outer") and err[1].endswith("<built-in method time.sleep>")


def test_cold_start_cases_every_mode_per_model_with_an_empty_or_shared_jit_cache():
    from benchmarks import cold_start

    a = cold_start.parse(["--models", "resnet50-infer-b1,decoder-train-b8"])
    a_warm = cold_start.parse(["--models", "decoder-train-b8", "--warm-jit"])
    places = {m: (f"{m}.plans", f"{m}.kept") for m in a.models}
    cases = cold_start.cases(a, places)
    assert [(c.row, c.mode) for c in cases][:5] == [("resnet50-infer-b1", m)
                                                     for m in cold_start.MODES]
    assert len(cases) == 10 and all(dict(c.env)["CUDA_CACHE_PATH"] == "{tmp}" for c in cases)
    kept = cases[4].argv
    assert kept[:4] == ("-m", "benchmarks.cold_start", "--child", "pinned kept")
    assert kept[kept.index("--plan-file") + 1] == "resnet50-infer-b1.plans"
    assert kept[kept.index("--kept") + 1] == "resnet50-infer-b1.kept"
    warm = cold_start.cases(a_warm, {"decoder-train-b8": ("p", "k")})
    assert {dict(c.env)["CUDA_CACHE_PATH"] for c in warm} == {"{round}"}
    with pytest.raises(SystemExit):
        cold_start.parse(["--models", "resnet50,vgg"])


def test_cold_start_process_age_counts_from_the_process_start():
    import time

    from benchmarks import cold_start

    age = cold_start.process_age_s()
    assert 0 < age < time.monotonic() + 1  # positive, and no older than the machine
    time.sleep(0.05)
    assert cold_start.process_age_s() >= age + 0.03


def test_cold_start_decoder_upsamples_with_transposed_convolutions():
    torch = pytest.importorskip("torch")
    from benchmarks import cold_start

    model = cold_start.decoder()
    assert sum(isinstance(m, torch.nn.ConvTranspose2d) for m in model.modules()) == 5
    assert model(torch.zeros(1, 3, 224, 224)).shape == (1, 3, 224, 224)


def test_cold_start_setup_and_child_read_one_plan_file():
    from benchmarks import cold_start

    for role in (["--setup"], ["--child", "pinned kept"]):
        a = cold_start.parse(role + ["--model", "decoder-train-b8", "--plan-file", "p.json",
                                     "--kept", "p.kept"])
        assert a.plan_file == "p.json" and a.kept == "p.kept" and a.model == "decoder-train-b8"


def test_cold_start_splits_plans_made_by_engine_kind_and_leaves_the_rest(monkeypatch, capsys):
    from benchmarks import cold_start
    from types import SimpleNamespace

    from cudnn_explorer.core.pin_report import PlanMade
    from cudnn_explorer.pinning import op

    made = [PlanMade("a", "ConvFwd_eng71_k2=1", builds=1, build_ms=400.0, runtime_compiled=True),
            PlanMade("b", "ConvBwdData_eng71_k2=3", builds=1, build_ms=300.0,
                     runtime_compiled=True),
            PlanMade("c", "ConvFwd_eng0", builds=1, build_ms=5.0),
            PlanMade("d", "ConvFwd_eng57_k2=5", restored=1, build_ms=2.0, waited_ms=1.5)]
    monkeypatch.setattr(op, "plans_made", lambda: made)
    monkeypatch.setattr(op, "pin_counts", lambda: SimpleNamespace(pinned_calls=9,
                                                                 fallback_calls=0))
    first = cold_start.made_figures(1000.0, 100.0, on_first_call=True)
    assert (first["compiled_plans"], first["compiled_ms"]) == (2, 700.0)
    assert (first["precompiled_plans"], first["precompiled_ms"]) == (2, 7.0)
    assert first["restored"] == 1 and first["rest_ms"] == 1000.0 - 100.0 - 707.0
    ahead = cold_start.made_figures(1000.0, 100.0, on_first_call=False)
    assert ahead["rest_ms"] == 1000.0 - 100.0 - 1.5  # only the waits are on its path
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "cold_start: engine 71 (run-time compiled): 2 plan(s), 700.0 ms made"


def test_zero_code_runs_the_script_per_mode_and_pairs_losses_with_benchmark_off(tmp_path):
    from benchmarks import zero_code

    def set_up(a, config, work, store):
        return {"plans": f"{config}.plans.json", "record_s": 12.0, "tune_s": 40.0}

    def values(case, n):
        loss = {"benchmark off": 1.0, "benchmark on": 1.01, "pinned": 0.98,
                "recorded": 1.0}[case.mode]
        steady = 5.4 if case.mode == "recorded" else 5.0
        return {"wall_s": 9.0, "rc": 0.0, "steady_step_ms": steady, "loss_0": loss,
                "loss_1": loss / 2, **({"coverage_pct": 100.0} if case.mode == "pinned" else {})}
    path = tmp_path / "r.json"
    run = fake_runner(values)
    rc = zero_code.main(["--repeats", "1", "--json", str(path)], runner=run, env=ENV,
                        set_up=set_up)
    doc = json.loads(path.read_text())
    assert rc == 0 and doc["rows"] == ["eager", "compiled"] and len(run.calls) == 8
    by = {(c["row"], c["mode"], c["figure"]): c["median"] for c in doc["cells"]}
    assert by[("eager", "pinned", "loss_vs_off")] == pytest.approx(0.02)
    assert by[("eager", "benchmark on", "loss_vs_off")] == pytest.approx(0.01)
    assert ("eager", "benchmark off", "loss_vs_off") not in by
    assert by[("eager", "recorded", "loss_vs_off")] == 0.0
    # the recording's cost: its steady step beside off's, in the same run
    ratio = {(r["row"], r["mode"], r["figure"]): r["ratio"] for r in doc["ratios"]}
    assert ratio[("eager", "recorded", "steady_step_ms")] == pytest.approx(1.08)
    assert by[("compiled", "pinned", "tune_s")] == 40.0 and by[("eager", "pinned",
                                                              "coverage_pct")] == 100.0
    cases = zero_code.cases(zero_code.parse(["--configs", "compiled"]),
                            {"compiled": "p.json"})
    pinned = cases[2].argv
    assert pinned[:5] == ("-m", "cudnn_explorer", "run", "--plans", "p.json")
    assert "--compile" in pinned and "--cudnn-benchmark" in cases[0].argv
    recorded = cases[3].argv
    assert cases[3].mode == "recorded" and recorded[:6] == ("-m", "cudnn_explorer", "record",
                                                            "-o", "{tmp}/convs.json", "--")
    assert "--compile" in recorded and "--cudnn-benchmark" not in recorded
    assert dict(cases[1].env)["TORCHINDUCTOR_CACHE_DIR"] == "{tmp}/inductor"
    with pytest.raises(SystemExit):
        zero_code.parse(["--configs", "jit"])


def test_an_interrupted_zero_code_run_still_pairs_the_losses_it_has(tmp_path):
    from benchmarks import zero_code

    def set_up(a, config, work, store):
        return {"plans": "p.json", "record_s": 12.0, "tune_s": 40.0}

    def values(case, n):
        if n == 4:
            raise KeyboardInterrupt
        return {"wall_s": 9.0, "rc": 0.0, "loss_0": {"benchmark on": 1.5}.get(case.mode, 1.0)}
    path = tmp_path / "r.json"
    rc = zero_code.main(["--repeats", "1", "--json", str(path)], runner=fake_runner(values),
                        env=ENV, set_up=set_up)
    doc = json.loads(path.read_text())
    by = {(c["row"], c["mode"], c["figure"]): c["median"] for c in doc["cells"]}
    assert rc == 130 and doc["complete"] is False
    assert by[("eager", "benchmark on", "loss_vs_off")] == 0.5
    assert by[("eager", "pinned", "tune_s")] == 40.0


def test_zero_code_reads_the_scripts_figures_and_the_run_report(tmp_path):
    from benchmarks import zero_code
    from cudnn_explorer.core.pin_report import PinCounts, PinnedDirection
    from cudnn_explorer.core.zero_code import RunReport

    out = tmp_path / "o.json"
    out.write_text(json.dumps({"first_step_s": 1.5, "first_step_peak_gib": 0.25,
                               "steady_step_ms": 4.0, "losses": [2.0, 1.0], "step_ms": [1.0]}))
    plain = zero_code.read_run(str(out), 3.0)
    assert plain == {"first_step_s": 1.5, "first_step_peak_gib": 0.25, "steady_step_ms": 4.0,
                     "loss_0": 2.0, "loss_1": 1.0}
    report = RunReport(processes=1, counts=PinCounts(directions=[
        PinnedDirection(key=[1, 2], description="d", covered=True, pinned_calls=9,
                        fallback_calls=1)]))
    (tmp_path / "o.json.report").write_text(json.dumps(report.to_dict()))
    assert zero_code.read_run(str(out), 3.0)["coverage_pct"] == 90.0


def test_train_example_trains_every_size_with_a_penalty_through_every_convolution():
    torch = pytest.importorskip("torch")
    from benchmarks import train_example

    assert sorted(set(train_example.schedule([48, 64, 96], 7, 0))) == [48, 64, 96]
    model = train_example.Net(width=8)
    x = torch.randn(2, 3, 48, 48, requires_grad=True)
    (grad,) = torch.autograd.grad(model(x).square().mean(), x, create_graph=True)
    grad.square().sum().backward()  # double backward reaches every convolution's weight
    convs = [m for m in model.modules() if isinstance(m, (torch.nn.Conv2d,
                                                          torch.nn.ConvTranspose2d))]
    assert len(convs) == 8 and all(m.weight.grad is not None and m.weight.grad.abs().sum() > 0
                                   for m in convs)
    assert model(torch.zeros(1, 3, 64, 64)).shape == (1, 3, 64, 64)


def test_zero_code_ctrl_c_while_setting_up_writes_nothing(tmp_path):
    from benchmarks import zero_code

    def set_up(*_):
        raise KeyboardInterrupt
    path = tmp_path / "r.json"
    assert zero_code.main(["--json", str(path)], runner=fake_runner(lambda c, n: {}), env=ENV,
                          set_up=set_up) == 130
    assert not path.exists()


def test_ratios_pair_each_repeat_with_the_baselines_run_beside_it():
    """A ratio of medians, and the least and greatest of the repeats' own ratios: a run
    over the baseline's run of the same repeat (a repeat missing from either is left
    out); rendered beside the ratio."""
    samples = {("r", "a"): [{"t": 10.0, "repeat": 0}, {"t": 20.0, "repeat": 1},
                            {"t": 12.0, "repeat": 2}],
               ("r", "b"): [{"t": 11.0, "repeat": 0}, {"t": 24.0, "repeat": 2}]}
    doc = doc_of(samples, [Figure("t", "time", "s")])
    (r,) = doc["ratios"]
    assert r["ratio"] == pytest.approx(17.5 / 12) and r["paired"] == [pytest.approx(1.1), 2.0]
    assert render.render(doc).splitlines()[2].endswith("| 1.458 (1.10–2.00) |")
    one = doc_of({k: v[:1] for k, v in samples.items()}, [Figure("t", "time", "s")])
    assert "paired" not in one["ratios"][0]  # one pair: no spread to give


def test_zero_code_compares_each_runs_loss_with_benchmark_offs_run_of_its_repeat():
    """loss_vs_off pairs a run with benchmark off's run of the same repeat: off's run of
    repeat 0 missing, the runs of repeat 1 are still compared with each other."""
    from benchmarks import zero_code

    samples = {("eager", "benchmark off"): [{"loss_0": 2.0, "repeat": 1}],
               ("eager", "pinned"): [{"loss_0": 1.0, "repeat": 0}, {"loss_0": 2.2, "repeat": 1}]}
    zero_code.loss_differences(samples)
    first, second = samples[("eager", "pinned")]
    assert "loss_vs_off" not in first and second["loss_vs_off"] == pytest.approx(0.1)
