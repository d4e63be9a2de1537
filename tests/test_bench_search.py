"""scripts/bench_search.py without a GPU: each problem kept as it finishes, a kept one not
measured again, the totals over what finished (an interrupt included)."""
import json
import os
import sys

import pytest

import fakes
from conftest import load_script
from cudnn_explorer.core.options import ExploreOptions


@pytest.fixture
def bench(monkeypatch):
    mod = load_script("bench_search")
    measured = []

    def measure_problem(name, p, full, staged, worker=None, keep_stem=None, shared=None,
                        code=None):
        if name == "fp32-no-tf32" and os.environ.get("BENCH_INTERRUPT"):
            raise KeyboardInterrupt
        measured.append(name)
        hit = name != "fp32-tf32"
        return {"wall_s": {"full": 10.0, "staged": 2.0},
                "rows": [{"problem": name, "direction": "fwd", "full_best": "a",
                          "staged_best": "a" if hit else "b", "full_ms": 1.0,
                          "staged_ms": 1.0 if hit else 1.5, "hit": hit,
                          "pick_ratio": 1.01}]}

    monkeypatch.setattr(mod, "measure_problem", measure_problem)
    return mod, measured


def options_seen(mod, monkeypatch):
    """The (full, staged) options each measured problem is given, as a list filled in."""
    seen = []
    real = mod.measure_problem

    def measure_problem(name, p, full, staged, worker=None, keep_stem=None, shared=None,
                        code=None):
        seen.append((full, staged))
        return real(name, p, full, staged, worker, keep_stem, shared, code)

    monkeypatch.setattr(mod, "measure_problem", measure_problem)
    return seen


def run(mod, monkeypatch, tmp_path, *args):
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["bench_search.py", *args, "--json", str(out)])
    assert mod.main() == 0
    return json.loads(out.read_text())


def test_kept_problems_are_not_measured_again(bench, monkeypatch, tmp_path, capsys):
    mod, measured = bench
    keep = tmp_path / "keep"
    names = "default,fp32-tf32"
    got = run(mod, monkeypatch, tmp_path, "--problems", names, "--keep", str(keep))
    assert measured == ["default", "fp32-tf32"]
    assert sorted(os.listdir(keep)) == ["default.json", "fp32-tf32.json"]
    assert (got["hits"], got["scored"], got["wall_s"]) == (1, 2, {"full": 20.0, "staged": 4.0})
    assert "miss: " in capsys.readouterr().out  # fp32-tf32's staged best is 50% slower
    again = run(mod, monkeypatch, tmp_path, "--problems", names + ",fp32-no-tf32",
                "--keep", str(keep))
    assert measured == ["default", "fp32-tf32", "fp32-no-tf32"]  # only the new one
    assert (again["hits"], again["scored"]) == (2, 3)
    assert again["checks"]["pick_within_3pct"] is True


def test_a_problem_kept_by_other_sources_is_measured_again(bench, monkeypatch, tmp_path,
                                                            capsys):
    """A folder kept from an earlier version of the tool (say, on a machine that kept /tmp
    from another session) never mixes into this run's totals: each kept document records
    the sources' digest, and one of other sources is measured again, saying so."""
    mod, measured = bench
    keep = tmp_path / "keep"
    run(mod, monkeypatch, tmp_path, "--problems", "default", "--keep", str(keep))
    kept = json.loads((keep / "default.json").read_text())
    assert kept["code"] == mod.code_digest()
    kept["code"] = "0123456789abcdef"
    (keep / "default.json").write_text(json.dumps(kept))
    got = run(mod, monkeypatch, tmp_path, "--problems", "default", "--keep", str(keep))
    assert measured == ["default", "default"]
    assert got["code"] == mod.code_digest()
    assert ("kept by other sources (0123456789abcdef, these are " + mod.code_digest()
            + "): measured again") in capsys.readouterr().out
    assert json.loads((keep / "default.json").read_text())["code"] == mod.code_digest()
    # --as-kept reads it whatever measured it, and measures nothing
    (keep / "default.json").write_text(json.dumps(kept))
    assert run(mod, monkeypatch, tmp_path, "--problems", "default", "--keep", str(keep),
               "--as-kept")["code"] is None
    assert measured == ["default", "default"]


def test_as_kept_measures_nothing_and_names_a_problem_not_kept(bench, monkeypatch, tmp_path):
    mod, measured = bench
    keep = tmp_path / "keep"
    monkeypatch.setattr(sys, "argv", ["bench_search.py", "--problems", "default",
                                      "--keep", str(keep), "--as-kept"])
    with pytest.raises(SystemExit, match=r"--as-kept: default is not kept \(.*default.json "
                                         r"is missing\)"):
        mod.main()
    monkeypatch.setattr(sys, "argv", ["bench_search.py", "--as-kept"])
    with pytest.raises(SystemExit, match="give --keep"):
        mod.main()
    assert measured == []


def test_the_code_digest_follows_the_sources_and_nothing_else(tmp_path):
    mod = load_script("bench_search")
    for name in ("setup.py", "scripts/bench_search.py", "csrc/a.cpp", "cudnn_explorer/x.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("one")
    first = mod.code_digest(str(tmp_path))
    (tmp_path / "cudnn_explorer" / "__pycache__").mkdir()
    (tmp_path / "cudnn_explorer" / "__pycache__" / "x.pyc").write_text("cache")
    (tmp_path / "README.md").write_text("docs")
    assert mod.code_digest(str(tmp_path)) == first
    (tmp_path / "csrc" / "a.cpp").write_text("two")
    assert mod.code_digest(str(tmp_path)) != first
    assert len(first) == 16


def test_an_interrupt_keeps_the_totals_of_what_finished(bench, monkeypatch, tmp_path,
                                                       capsys):
    mod, measured = bench
    monkeypatch.setenv("BENCH_INTERRUPT", "1")
    got = run(mod, monkeypatch, tmp_path, "--problems", "default,fp32-no-tf32,fp32-tf32")
    assert measured == ["default"] and got["scored"] == 1
    assert "interrupted: the totals of the 1 problems that finished" in capsys.readouterr().out


def test_the_model_profile_compares_a_model_sweeps_search_with_itself_staged(
        bench, monkeypatch, tmp_path):
    mod, measured = bench
    seen = options_seen(mod, monkeypatch)
    keep = tmp_path / "keep"
    got = run(mod, monkeypatch, tmp_path, "--problems", "default", "--model-profile",
              "--keep", str(keep))
    ((full, staged),) = seen
    # the model sweep's quick profile: listed configs only, 10 ms budgets, staged; against
    # the very same options unstaged
    assert (staged.staged, staged.engine_sampling, staged.budget_ms) == (True, False, 10.0)
    assert staged == ExploreOptions.create().profiled("quick", model=True)
    assert full == staged.updated(staged=False)
    assert got["compared"].startswith("the model sweep's quick profile")
    # kept apart from the problem profiles' comparison of the same problem
    assert os.listdir(keep) == ["default.model-profile.json"]
    run(mod, monkeypatch, tmp_path, "--problems", "default", "--keep", str(keep))
    assert sorted(os.listdir(keep)) == ["default.json", "default.model-profile.json"]
    assert measured == ["default", "default"]


def test_no_pytorch_runs_no_children_and_is_kept_apart(bench, monkeypatch, tmp_path):
    mod, measured = bench
    seen = options_seen(mod, monkeypatch)
    keep = tmp_path / "keep"
    got = run(mod, monkeypatch, tmp_path, "--problems", "default", "--model-profile",
              "--no-pytorch", "--keep", str(keep))
    ((full, staged),) = seen
    assert (full.pytorch, staged.pytorch) == (False, False)
    assert staged == full.updated(staged=True)  # the same search but staged
    assert got["compared"].endswith("without PyTorch's children (no picks)")
    assert os.listdir(keep) == ["default.model-profile.no-pytorch.json"]


def test_a_config_timeout_reaches_both_profiles(bench, monkeypatch, tmp_path):
    mod, measured = bench
    seen = options_seen(mod, monkeypatch)
    run(mod, monkeypatch, tmp_path, "--problems", "default", "--config-timeout", "15")
    ((full, staged),) = seen
    assert full.engine_config_timeout_s == staged.engine_config_timeout_s == 15.0
    assert (full.staged, staged.staged) == (False, True)
    with pytest.raises(SystemExit, match=r"--config-timeout 0: a number of seconds > 0"):
        run(mod, monkeypatch, tmp_path, "--problems", "default", "--config-timeout", "0")


def test_each_profiles_search_is_kept_so_a_cut_thorough_one_keeps_the_quick(
        monkeypatch, tmp_path):
    import cudnn_explorer as ce

    mod = load_script("bench_search")
    ran = []

    def explore(p, opts, bench=None):
        ran.append("staged" if opts.staged else "full")
        if not opts.staged and os.environ.get("BENCH_CUT"):
            raise KeyboardInterrupt  # the call's deadline, during the thorough search
        return fakes.exploration()

    monkeypatch.setattr(ce, "explore", explore)
    monkeypatch.setattr(mod, "retimed", lambda *a, **k: {})
    full = ExploreOptions.create().profiled("thorough")
    staged = full.profiled("quick")
    stem = str(tmp_path / "default")
    monkeypatch.setenv("BENCH_CUT", "1")
    with pytest.raises(KeyboardInterrupt):
        mod.measure_problem("default", None, full, staged, keep_stem=stem)
    assert ran == ["staged", "full"]  # the quick search first
    assert os.listdir(tmp_path) == ["default.staged.json"]
    kept = json.loads((tmp_path / "default.staged.json").read_text())
    assert kept["exploration"] == fakes.exploration().to_dict() and kept["wall_s"] >= 0
    monkeypatch.delenv("BENCH_CUT")
    one = mod.measure_problem("default", None, full, staged, keep_stem=stem)
    assert ran == ["staged", "full", "full"]  # the quick one read back, not run again
    assert one["wall_s"]["staged"] == kept["wall_s"]
    assert sorted(os.listdir(tmp_path)) == ["default.full.json", "default.staged.json"]


def test_each_exploration_starts_with_an_empty_jit_cache(monkeypatch, tmp_path):
    import cudnn_explorer as ce

    mod = load_script("bench_search")
    seen = []

    def explore(p, opts, bench=None):
        assert bench is None  # its own processes, as a single problem's exploration
        d = os.environ["CUDA_CACHE_PATH"]
        assert os.path.isdir(d) and not os.listdir(d)
        seen.append(d)
        return fakes.exploration()

    monkeypatch.setattr(ce, "explore", explore)
    monkeypatch.setenv("CUDA_CACHE_PATH", "/somewhere/else")
    p = ce.ConvProblem.create("1,8,8,8")
    mod.explored(p, None)
    mod.explored(p, None)
    assert len(set(seen)) == 2 and not any(os.path.exists(d) for d in seen)
    assert os.environ["CUDA_CACHE_PATH"] == "/somewhere/else"  # as it was
    monkeypatch.delenv("CUDA_CACHE_PATH")
    mod.explored(p, None)
    assert "CUDA_CACHE_PATH" not in os.environ


def test_the_model_profile_shares_one_bench_per_profile_as_a_sweep_does(monkeypatch,
                                                                        tmp_path):
    """--model-profile: each profile's explorations run on one kept bench (one engine
    worker for every problem, as in a model sweep), each profile's processes under a JIT
    cache of its own for the whole run; the benches are closed at the end, also when
    interrupted."""
    import cudnn_explorer as ce
    from cudnn_explorer.measure import pipeline

    mod = load_script("bench_search")
    benches, seen = [], []

    class Bench:
        def __init__(self, device, keep_worker=None):
            assert keep_worker is True
            self.closed = False
            benches.append(self)

        def close(self):
            self.closed = True

    def explore(p, opts, bench=None):
        if os.environ.get("BENCH_CUT") and len(seen) == 3:
            raise KeyboardInterrupt
        seen.append(("staged" if opts.staged else "full", bench,
                     os.environ["CUDA_CACHE_PATH"]))
        return fakes.exploration()

    monkeypatch.setattr(pipeline, "GpuBench", Bench)
    monkeypatch.setattr(ce, "explore", explore)
    monkeypatch.setattr(mod, "retimed", lambda *a, **k: {})
    monkeypatch.delenv("CUDA_CACHE_PATH", raising=False)
    run(mod, monkeypatch, tmp_path, "--problems", "default,fp32-tf32", "--model-profile",
        "--no-pytorch")
    assert [s[0] for s in seen] == ["staged", "full", "staged", "full"]
    staged, full = seen[0][1:], seen[1][1:]
    assert seen[2][1:] == staged and seen[3][1:] == full  # the same bench and cache
    assert staged[0] is not full[0] and staged[1] != full[1]
    assert len(benches) == 2 and all(b.closed for b in benches)
    assert not os.path.exists(staged[1]) and "CUDA_CACHE_PATH" not in os.environ
    benches.clear()
    seen.clear()
    monkeypatch.setenv("BENCH_CUT", "1")
    run(mod, monkeypatch, tmp_path, "--problems", "default,fp32-tf32", "--model-profile",
        "--no-pytorch")
    assert len(seen) == 3 and all(b.closed for b in benches)


def test_the_quick_searchs_own_pick_is_compared():
    """benchmark mode's pick can differ between the two explorations' processes: the quick
    search's own pick (a finalist there) is the one compared, and the thorough search
    times every config it lists; a pick one search did not time in full has no ratio."""
    from types import SimpleNamespace as NS

    mod = load_script("bench_search")

    def direction(pick, times):
        return NS(pytorch_pick=lambda mode: NS(engine_tag=pick) if pick else None,
                  config_timing=lambda tag: NS(median_ms=times[tag]) if tag in times else None)

    full = direction("eng1", {"eng1": 1.0, "eng2": 2.0})
    quick = direction("eng2", {"eng2": 2.02})  # eng1 left the quick search in a round
    pick = mod.benchmark_pick(full, quick)
    assert pick.engine_tag == "eng2"
    assert mod.pick_ratio(full, quick, pick.engine_tag) == pytest.approx(1.01)
    assert mod.pick_ratio(full, quick, "eng1") is None
    assert mod.benchmark_pick(full, direction(None, {})).engine_tag == "eng1"
    assert mod.benchmark_pick(full, None).engine_tag == "eng1"


def test_the_pick_ratios_are_summed_up_by_their_median():
    """Beside the count within 3%, the benchmark gives the median, least and greatest of
    PyTorch's pick's quick / thorough medians over the rows that compared it."""
    mod = load_script("bench_search")
    rows = [{"pick_ratio": 1.044}, {"pick_ratio": 0.978}, {"hit": True},
            {"pick_ratio": 1.0}, {"error": "no best config"}, {"pick_ratio": 0.995}]
    got = mod.pick_ratios(rows)
    assert got == {"count": 4, "median": 0.9975, "min": 0.978, "max": 1.044, "beyond_3pct": 1}
    assert mod.pick_ratios_text(got) == (
        "PyTorch's pick, quick / thorough median, over the 4 compared: median 0.998 "
        "(least 0.978, greatest 1.044)")
    none = mod.pick_ratios([{"hit": True}])
    assert none == {"count": 0, "median": None, "min": None, "max": None, "beyond_3pct": 0}
    assert mod.pick_ratios_text(none) == "PyTorch's pick, quick / thorough median: none compared"


def test_the_same_configs_medians_in_both_searches_are_compared():
    """Beside PyTorch's pick, every config the quick search timed in full (a finalist, not
    WRONG) that the thorough one timed too gives its quick / thorough median: how far one
    plan's median moves between the two searches anyway."""
    from types import SimpleNamespace as NS

    mod = load_script("bench_search")

    def direction(configs):
        by_tag = {c.tag: c for c in configs}
        return NS(engines=NS(configs=configs),
                  config_timing=lambda tag: by_tag[tag].timing
                  if tag in by_tag and not by_tag[tag].wrong else None)

    def config(tag, ms, left=None, wrong=False):
        return NS(tag=tag, timing=NS(median_ms=ms), left_round=left, wrong=wrong)

    full = direction([config("a", 1.0), config("b", 2.0), config("c", 3.0),
                      config("d", 4.0), config("e", 5.0)])
    quick = direction([config("b", 2.06), config("a", 0.99), config("c", 3.3, left=1),
                       config("d", 4.0, wrong=True), config("f", 1.0)])
    assert mod.finalist_ratios(full, quick) == [1.03, 0.99]  # c left, d WRONG, f not in full
    assert mod.finalist_ratios(full, None) == []
    assert mod.finalist_ratios(full, NS(engines=None)) == []
    got = mod.ratio_summary([1.03, 0.99, 1.031])
    assert got == {"count": 3, "median": 1.03, "min": 0.99, "max": 1.031, "beyond_3pct": 1}
    assert mod.finalist_ratios_text(got) == (
        "the same config timed in full by both searches, quick / thorough median, over 3 "
        "configs: median 1.030 (least 0.990, greatest 1.031); 1 more than 3% from 1")
    assert mod.finalist_ratios_text(mod.ratio_summary([])).endswith(": none compared")


def test_kept_rows_get_their_finalist_ratios_from_the_kept_explorations(
        monkeypatch, tmp_path, capsys):
    """A problem kept by an earlier version of the script (rows without finalist_ratios)
    gets them from its two kept explorations, with no GPU and nothing measured; the totals
    then sum them."""
    mod = load_script("bench_search")

    import dataclasses

    from cudnn_explorer.core.records import EngineConfig, EngineSpace

    def explored_dir(times, left=()):
        configs = [EngineConfig(tag=f"eng{i}", engine=i, status="OK",
                                timing=fakes.timing(ms), max_error=0.0, tolerance=1e-2,
                                output_finite=True,
                                left_round=1 if f"eng{i}" in left else None)
                   for i, ms in enumerate(times)]
        e = fakes.exploration()
        d = dataclasses.replace(e.directions[0], engines=EngineSpace(configs=configs))
        return dataclasses.replace(e, directions=[d])

    keep = tmp_path / "keep"
    keep.mkdir()
    staged = explored_dir([1.02, 2.0, 3.0], left=("eng2",))
    full = explored_dir([1.0, 2.1, 2.0])
    for label, e in (("staged", staged), ("full", full)):
        (keep / f"default.{label}.json").write_text(
            json.dumps({"wall_s": 1.0, "exploration": e.to_dict()}))
    (keep / "default.json").write_text(json.dumps(
        {"wall_s": {"full": 10.0, "staged": 2.0},
         "rows": [{"problem": "default", "direction": "fwd", "full_best": "eng0",
                   "staged_best": "eng0", "full_ms": 1.0, "staged_ms": 1.0, "hit": True}]}))

    def no_measuring(*args, **kwargs):
        raise AssertionError("a kept problem is not measured again")

    monkeypatch.setattr(mod, "measure_problem", no_measuring)
    got = run(mod, monkeypatch, tmp_path, "--problems", "default", "--keep", str(keep),
              "--as-kept")
    assert got["rows"][0]["finalist_ratios"] == [1.02, 0.9524]
    assert got["finalist_ratios"]["count"] == 2
    out = capsys.readouterr().out
    assert "over 2 configs: median 0.986 (least 0.952, greatest 1.020); 1 more than 3%" in out


def kept_totals(monkeypatch, tmp_path, folder, *args):
    """(the script, its --json) over a copy of data/reference/FOLDER (so that nothing is
    written into the repository) with --as-kept and ``args``, nothing measured."""
    import shutil

    mod = load_script("bench_search")
    here = os.path.dirname(__file__)
    keep = tmp_path / "keep"
    shutil.copytree(os.path.join(here, "..", "data", "reference", folder), keep)
    def no_measuring(*args, **kwargs):
        pytest.fail("every problem is kept")

    monkeypatch.setattr(mod, "measure_problem", no_measuring)
    return mod, run(mod, monkeypatch, tmp_path, "--keep", str(keep), "--as-kept", *args)


def docs_text_blocks():
    """The ```text blocks of docs/benchmarks.md, each a list of its lines."""
    with open(os.path.join(os.path.dirname(__file__), "..", "docs", "benchmarks.md")) as f:
        parts = f.read().split("```text\n")[1:]
    return [p.split("```")[0].strip().splitlines() for p in parts]


def test_the_h100_totals_come_from_the_kept_results(monkeypatch, tmp_path, capsys):
    """data/reference/h100-same-answers/ holds every problem's kept result of one H100 run:
    the script prints its totals from it, measuring nothing, and docs/benchmarks.md shows
    that output as the script prints it."""
    mod, got = kept_totals(monkeypatch, tmp_path, "h100-same-answers")
    assert sorted(got["problems"]) == sorted(mod.PROBLEMS)
    assert (got["hits"], got["scored"], got["pick_within_3pct"], got["picks"]) == (27, 27, 25, 27)
    assert sum(r["staged_best"] == r["full_best"] for r in got["rows"]) == 23
    out = capsys.readouterr().out
    assert ("PyTorch's pick, quick / thorough median, over the 27 compared: median 1.005 "
            "(least 0.975, greatest 1.042)") in out
    assert ("over 140 configs: median 1.001 (least 0.913, greatest 1.051); 9 more than 3% "
            "from 1") in out
    printed = out.splitlines()
    assert any(all(line in printed for line in block) and
               any("27 of 27" in line for line in block) for block in docs_text_blocks())


@pytest.mark.parametrize("folder, problems, counts, same_config, quoted", [
    ("h100-same-answers-five",
     "default,fp32-tf32,depthwise-fp16-nhwc,readme-bf16-nhwc,3d-fp16-nhwc", (15, 15, 11, 15),
     None,
     ("staged best within 2% of the full search's: 15 of 15; PyTorch's pick within 3%: 11 of "
      "15", "over the 15 compared: median 1.004 (least 0.984, greatest 1.042)",
      "over 66 configs: median 1.005 (least 0.958, greatest 1.042); 8 more than 3% from 1")),
    ("h200-same-answers", "default,fp32-tf32,depthwise-fp16-nhwc,readme-bf16-nhwc",
     (12, 12, 10, 12), 11,
     ("staged best within 2% of the full search's: 12 of 12; PyTorch's pick within 3%: 10 of "
      "12", "over the 12 compared: median 1.004 (least 0.985, greatest 1.037)",
      "over 52 configs: median 1.005 (least 0.985, greatest 1.038); 6 more than 3% from 1")),
])
def test_another_runs_totals_come_from_its_kept_results(
        monkeypatch, tmp_path, capsys, folder, problems, counts, same_config, quoted):
    """The same for the problems kept by another run (five on another H100, four on an
    H200): its hits, PyTorch's picks within 3% and, where given, how many best configs
    were the same in both searches."""
    _, got = kept_totals(monkeypatch, tmp_path, folder, "--problems", problems)
    assert (got["hits"], got["scored"], got["pick_within_3pct"], got["picks"]) == counts
    if same_config is not None:
        assert sum(r["staged_best"] == r["full_best"] for r in got["rows"]) == same_config
    out = " ".join(capsys.readouterr().out.split())
    for q in quoted:
        assert q in out, q
