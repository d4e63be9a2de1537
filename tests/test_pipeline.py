"""The whole pipeline on a CPU: options in, one Exploration out, through a fake bench whose
children are real processes and whose engine configs go through the real driver."""
import pytest
from dataclasses import replace

from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.report.tables import render_exploration

from conftest import requires_ext
from fakes import FakeBench

pytestmark = requires_ext  # the engine driver builds native TimingOptions (no GPU needed)

P = ConvProblem.create("8,64,28,28", out_channels=64, dtype="float16", layout="nhwc")


def run(tmp_path, monkeypatch, **kw):
    from cudnn_explorer.measure.pipeline import explore

    bench = FakeBench(tmp_path, monkeypatch)
    opts = ExploreOptions.create(directions="fwd,bwd-data", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30, **kw)
    return explore(P, opts, bench=bench), bench


def methods(exp):
    """(path, method, eager measured?) of every timed row."""
    out = []
    for d in exp.directions:
        out += [("legacy", r.timing.method, r.timing.eager is not None)
                for r in d.find if r.timing]
        out += [("engine", c.timing.method, c.timing.eager is not None)
                for c in d.engines.configs if c.timing]
        out += [("pytorch", p.steady.method, p.steady.eager is not None)
                for p in d.pytorch if p.steady]
    return out


def engine_eager(exp):
    """(left early?, eager measured?) of every timed engine config."""
    return [(c.left_round is not None, c.timing.eager is not None)
            for d in exp.directions for c in d.engines.configs if c.timing]


def legacy_eager(exp):
    """(left early?, eager measured?) of every timed legacy row."""
    return [(r.left_round is not None, r.timing.eager is not None)
            for d in exp.directions for r in d.find if r.timing]


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("kw,method,eager", [
    ({}, "graph", True),
    ({"flush_l2": True}, "eager+flush", False),
    ({"graph": False}, "eager", True),
])
def test_timing_options_reach_every_path(tmp_path, monkeypatch, kw, method, eager, staged):
    exp, bench = run(tmp_path, monkeypatch, staged=staged, **kw)
    got = methods(exp)
    assert {p for p, _, _ in got} == {"legacy", "engine", "pytorch"}
    assert all(m == method for _, m, _ in got), got
    # every row timed in full has the eager loop as the options say; a row or config that
    # left a staged search early was timed in its rounds only, without the loop
    assert all(e == eager for p, _, e in got if p == "pytorch"), got
    for rows in (engine_eager(exp), legacy_eager(exp)):
        assert all(e == (eager and not left) for left, e in rows), rows
        assert any(left for left, _ in rows) == staged
    # the engine driver handed the native timer exactly these options, a staged search's
    # rounds their own budgets (core.staging.ROUNDS', at most the full 5 ms)
    from cudnn_explorer.core.staging import ROUNDS

    budgets = {min(r.budget_ms, 5.0) for r in ROUNDS} | {5.0} if staged else {5.0}
    assert all(s[2] == kw.get("flush_l2", False) and s[3] == kw.get("graph", True)
               and s[4] in budgets for s in bench.seen)
    assert {s[4] for s in bench.seen} == budgets
    text = render_exploration(exp)
    assert f"one timing method for all ({method})" in text
    assert ("eager ms: wall time per call" in text) == eager
    assert exp.measurement.options["flush_l2"] == kw.get("flush_l2", False)
    assert exp.measurement.method == method


def test_no_retime_times_nothing_anywhere(tmp_path, monkeypatch):
    exp, bench = run(tmp_path, monkeypatch, retime=False)
    assert methods(exp) == []
    assert bench.seen and all(s[1] is False for s in bench.seen)  # configs run, not timed
    assert all(spec is None for c, *rest, spec in
               [x for x in bench.calls if x[0] == "measure"])  # legacy rows run once
    d = exp.directions[0]
    assert all(p.ok and p.steady is None for p in d.pytorch)
    assert all(r.correct for r in d.find if r.ok)  # still checked
    text = render_exploration(exp)
    assert "not re-timed (--no-retime)" in text and "median ms:" not in text


def test_records_built_once_and_complete(tmp_path, monkeypatch):
    exp, bench = run(tmp_path, monkeypatch)
    assert [d.direction for d in exp.directions] == ["fwd", "bwd-data"]
    assert ("close", "fwd") in bench.calls and ("close", "bwd-data") in bench.calls
    d = exp.direction("fwd")
    assert d.flops and d.min_bytes and d.find_wall_ms == 12.5
    # PyTorch's picks are matched to our rows by kernels in the same construction
    bench_pick = d.pytorch_pick("benchmark")
    assert bench_pick.same_kernels_as == ["IMPLICIT_PRECOMP_GEMM (TENSOR_OP_MATH)"]
    assert bench_pick.correct is True and bench_pick.engine_tag.startswith("ConvFwd_eng")
    # the engine search was seeded with PyTorch's pick and saw our legacy rows' kernels
    assert bench.preferred["fwd"][0] == bench_pick.engine_tag  # its pick first, then
    assert bench_pick.timed and {t for t, _ in bench_pick.timed} <= set(bench.preferred["fwd"])
    assert "IMPLICIT_PRECOMP_GEMM (TENSOR_OP_MATH)" in bench.legacy_seen["fwd"]
    assert d.engines.legacy_map == {}  # the fake reads no kernels: no map, not an empty one
    # where the legacy rows' time went: the lab's tensors and reference, its checks
    assert d.legacy_setup_s == 0.25 and d.legacy_checks_s > 0
    assert d.legacy_checks_s == pytest.approx(0.002 * round(d.legacy_checks_s / 0.002))
    # a saved result loads back equal
    again = Exploration.from_json(exp.to_json())
    assert again.to_dict() == exp.to_dict()


def test_benchmark_limit_zero_pick_is_found_by_summary_and_verdicts(tmp_path, monkeypatch):
    exp, _ = run(tmp_path, monkeypatch, benchmark_limit=0)
    d = exp.direction("fwd")
    assert [p.label for p in d.pytorch][0] == "benchmark, limit 0"
    pick = d.pytorch_pick("benchmark")
    assert pick is not None and pick.benchmark_limit == 0
    assert d.full_search_pick() is None  # no second run: the first one timed all
    text = render_exploration(exp)
    summary = text[text.index("== summary"):]
    assert "PyTorch's benchmark pick" in summary


def test_tables_fit_120_columns(tmp_path, monkeypatch):
    exp, _ = run(tmp_path, monkeypatch)
    text = render_exploration(exp)
    wide = [ln for ln in text.splitlines() if len(ln) > 120]
    assert not wide, wide


@pytest.mark.parametrize("kw,api,cli", [
    (dict(budget_ms=-1), "budget_ms -1", "--budget-ms -1"),
    (dict(directions="fwd,sideways"), "directions 'fwd,sideways'", "--direction fwd,sideways"),
    (dict(engine_configs=0), "engine_configs 0", "--engine-configs 0"),
    (dict(benchmark_limit=-2), "benchmark_limit -2", "--benchmark-limit -2"),
    (dict(child_timeout_s=float("inf")), "child_timeout_s inf", "--child-timeout inf"),
    (dict(retime="yes"), "retime 'yes'", None),
])
def test_options_errors_name_the_parameter_or_the_flag(kw, api, cli):
    with pytest.raises(UserError, match="^" + api.replace("(", r"\(").replace(")", r"\)")):
        ExploreOptions.create(**kw)
    if cli:
        strs = {k: str(v) for k, v in kw.items()}
        with pytest.raises(UserError, match="^" + cli):
            ExploreOptions.create(source="cli", **strs)


def test_options_defaults_round_trip_and_timing():
    o = ExploreOptions.create()
    assert o.directions == ("fwd", "bwd-data", "bwd-filter") and o.engines and o.pytorch
    assert ExploreOptions.from_dict(o.to_dict()) == o
    t = ExploreOptions.create(budget_ms=40, flush_l2=True).timing
    assert t.method == "eager+flush" and t.eager_budget_ms == 0
    assert ExploreOptions.create(budget_ms=40).timing.eager_budget_ms == 10
    with pytest.raises(UserError, match="unknown option 'budget'"):
        ExploreOptions.create(budget=3)


class LowMemoryBench(FakeBench):
    """bwd-data's tensors do not fit; fwd's engine configs run out of memory."""

    def lab(self, problem, direction, options):
        from cudnn_explorer.core.errors import ResourceError

        if direction == "bwd-data":
            raise ResourceError("out of GPU memory for the bwd-data tensors: needs about "
                                "300 MiB, 256 MiB free on GPU 0")
        return super().lab(problem, direction, options)

    def engines(self, *args, **kw):
        from cudnn_explorer.core.errors import ResourceError

        raise ResourceError("out of GPU memory building a plan")


def test_out_of_memory_keeps_what_finished(tmp_path, monkeypatch):
    from cudnn_explorer.measure.pipeline import explore

    opts = ExploreOptions.create(directions="fwd,bwd-data", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30)
    exp = explore(P, opts, bench=LowMemoryBench(tmp_path, monkeypatch))
    fwd, bwd = exp.directions
    assert fwd.best() is not None and fwd.engines is None
    assert fwd.error == "engine configs: out of GPU memory building a plan"
    assert bwd.find == [] and "256 MiB free" in bwd.error
    text = render_exploration(Exploration.from_json(exp.to_json()))
    assert "not explored: out of GPU memory for the bwd-data tensors" in text
    assert "not finished: engine configs: out of GPU memory" in text


class FindFailsBench(FakeBench):
    """bwd-data's Find fails on a GPU short of memory, as on the H200 with 2 GiB free (a
    torch call inside it raised "cuDNN error: CUDNN_STATUS_INTERNAL_ERROR")."""

    def free_bytes(self):
        return 23 * 2**20

    def lab(self, problem, direction, options):
        lab = super().lab(problem, direction, options)
        if direction == "bwd-data":
            def find(cap):
                from cudnn_explorer.core.errors import GpuError

                raise GpuError("the native call failed finding bwd-data algorithms: cuDNN "
                               "error: CUDNN_STATUS_INTERNAL_ERROR")
            lab.find = find
        return lab


def test_a_gpu_fault_in_one_direction_keeps_the_others(tmp_path, monkeypatch):
    from cudnn_explorer.measure.pipeline import explore

    opts = ExploreOptions.create(budget_ms=5, child_timeout_s=30, engine_budget_s=30)
    exp = explore(P, opts, bench=FindFailsBench(tmp_path, monkeypatch))
    fwd, bwd, wgrad = exp.directions
    # kept, and marked incomplete: bwd-data's error says what is missing
    assert not exp.complete and fwd.best() is not None and wgrad.best() is not None
    assert fwd.engines is not None and wgrad.engines is not None and not fwd.error
    assert bwd.find == [] and bwd.error == (
        "the native call failed finding bwd-data algorithms: cuDNN error: "
        "CUDNN_STATUS_INTERNAL_ERROR (23 MiB free on GPU 0 when it failed)")
    text = render_exploration(Exploration.from_json(exp.to_json()))
    assert "not explored: the native call failed finding bwd-data" in text


class ShortBench(FakeBench):
    """The GPU has no room for bwd-data's float64 reference: the lab made it on the CPU."""

    def lab(self, problem, direction, options):
        lab = super().lab(problem, direction, options)
        lab.reference_on_cpu = direction == "bwd-data"
        return lab


def test_a_reference_made_on_the_cpu_is_recorded_and_said(tmp_path, monkeypatch):
    from dataclasses import replace as rep

    from cudnn_explorer.measure.pipeline import explore

    opts = ExploreOptions.create(directions="fwd,bwd-data", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30)
    exp = explore(P, opts, bench=ShortBench(tmp_path, monkeypatch))
    assert [d.reference_on_cpu for d in exp.directions] == [False, True]
    back = Exploration.from_json(exp.to_json())
    assert [d.reference_on_cpu for d in back.directions] == [False, True]
    text = " ".join(render_exploration(back).split())
    assert text.count("accuracy: the float64 reference for") == 1
    assert ("accuracy: the float64 reference for the rows was computed on the CPU from the "
            "same inputs (the GPU had no room for it beside the workspace)") in text
    # the engine worker's own reference on the CPU too
    fwd = rep(back.directions[0], engines=rep(back.directions[0].engines, reference_on_cpu=True))
    text = " ".join(render_exploration(rep(back, directions=[fwd])).split())
    assert "the float64 reference for the engine configs was computed on the CPU" in text


def test_the_free_memory_is_said_once():
    from cudnn_explorer.core.errors import GpuError, ResourceError
    from cudnn_explorer.measure.pipeline import _with_free_memory

    e = ResourceError("out of GPU memory: needs about 300 MiB, 256 MiB free on GPU 0")
    assert _with_free_memory(e, 5 << 20, 0) is e
    g = GpuError("CUDA failed")
    assert _with_free_memory(g, None, 1) is g
    said = _with_free_memory(g, 5 << 20, 1)
    assert type(said) is GpuError and str(said) == \
        "CUDA failed (5 MiB free on GPU 1 when it failed)"


class WorkerFailsBench(FakeBench):
    """The engine worker dies before its first config (as one did on a GPU with 2 GiB free:
    its CUDA context did not fit)."""

    def engines(self, *args, **kw):
        from cudnn_explorer.core.errors import ChildError

        raise ChildError("engine worker for fwd failed (rc 1): CUDA error: out of memory")


def test_a_failed_engine_worker_keeps_the_legacy_rows(tmp_path, monkeypatch):
    from cudnn_explorer.measure.pipeline import explore

    opts = ExploreOptions.create(directions="fwd", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30)
    seen = []
    exp = explore(P, opts, bench=WorkerFailsBench(tmp_path, monkeypatch), progress=seen.append)
    (fwd,) = exp.directions
    assert fwd.best() is not None and fwd.engines is None and not exp.complete
    assert fwd.error == ("engine configs: engine worker for fwd failed (rc 1): CUDA error: "
                         "out of memory")
    assert any("engine configs: engine worker for fwd failed" in m for m in seen)
    text = render_exploration(Exploration.from_json(exp.to_json()))
    assert "not finished: engine configs: engine worker for fwd failed" in text


def test_find_under_every_math_type_marks_pytorchs_rows(tmp_path, monkeypatch):
    exp, _ = run(tmp_path, monkeypatch, engines=False)
    d = exp.direction("fwd")
    assert d.searched_math_types == ["DEFAULT_MATH", "TENSOR_OP_MATH"]
    keys = [r.key for r in d.find]
    assert len(keys) == len(set(keys))  # one row per (algorithm, math type)
    extra = [r for r in d.find if r.pytorch_candidate is False]
    assert [r.algo_name for r in extra] == ["WINOGRAD_NONFUSED"]
    assert extra[0].found_under == "TENSOR_OP_MATH"
    assert d.best().algo_name == "WINOGRAD_NONFUSED"
    assert d.best(pytorch_only=True).algo_name == "IMPLICIT_PRECOMP_GEMM"
    text = render_exploration(exp)
    assert "best among PyTorch's legacy candidates (DEFAULT_MATH): IMPLICIT_PRECOMP_GEMM" in text
    assert "WINOGRAD_NONFUSED      TENSOR_OP+" in text


class InterruptedBench(FakeBench):
    """Ctrl-C arrives while bwd-data is measured."""

    def lab(self, problem, direction, options):
        if direction == "bwd-data":
            raise KeyboardInterrupt
        return super().lab(problem, direction, options)


def test_an_interrupt_keeps_the_directions_that_finished(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) mid-run: Interrupted carries the Exploration of what finished,
    marked incomplete, which saves, loads and renders like any other."""
    from cudnn_explorer.core.errors import Interrupted
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.measure.pipeline import explore
    from cudnn_explorer.report.tables import render_exploration

    bench = InterruptedBench(tmp_path, monkeypatch)
    opts = ExploreOptions.create(directions="fwd,bwd-data", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30)
    with pytest.raises(Interrupted) as e:
        explore(P, opts, bench=bench)
    part = e.value.partial
    assert part is not None and not part.complete
    assert [d.direction for d in part.directions] == ["fwd"]
    assert '"complete": false' in part.to_json()
    back = Exploration.from_json(part.to_json())
    assert not back.complete and back.to_dict() == part.to_dict()
    assert "fwd" in render_exploration(back)
    assert '"complete"' not in explore(P, opts.updated(directions=("fwd",)),
                                       bench=FakeBench(tmp_path, monkeypatch)).to_json()


def test_the_command_line_shows_and_saves_an_interrupted_run(tmp_path, monkeypatch, capsys):
    from cudnn_explorer.cli.main import main
    from cudnn_explorer.core.errors import Interrupted
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.jobs import explore as job

    part, _ = run(tmp_path, monkeypatch)
    part = replace(part, directions=part.directions[:1], complete=False)

    def interrupted(*a, **kw):
        raise Interrupted(part)

    monkeypatch.setattr(job, "explore", interrupted)
    out = tmp_path / "r.json"
    code = main(["--shape", "8,64,28,28", "--dtype", "float16", "--layout", "nhwc",
                 "--direction", "fwd,bwd-data", "--json", str(out), "--no-store"])
    captured = capsys.readouterr()
    assert code == 130
    assert "interrupted: 1 of 2 directions finished (fwd)" in captured.err
    assert '"complete": false' in captured.err and str(out) in captured.err
    assert "fwd" in captured.out
    assert not Exploration.from_json(out.read_text()).complete


class ShortOfMemoryBench(FakeBench):
    """Engine configs in a real engine worker process (fakes.SHORT_OF_MEMORY_WORKER), whose
    fwd search runs out of GPU memory in its third config."""

    def __init__(self, tmp_path, monkeypatch):
        from fakes import SHORT_OF_MEMORY_WORKER
        from cudnn_explorer.measure.engine_worker import EngineWorker

        super().__init__(tmp_path, monkeypatch)
        (tmp_path / "short_of_memory_worker.py").write_text(SHORT_OF_MEMORY_WORKER)
        self.worker = EngineWorker("short_of_memory_worker")

    def engines(self, problem, direction, options, legacy_rows, preferred_tags, say,
                finalist_tags=None, held=None):
        from cudnn_explorer.core.search_preferences import SearchPreferences
        from cudnn_explorer.measure.engine_worker import explore_isolated

        return explore_isolated(problem, direction, options,
                                SearchPreferences(legacy_rows=legacy_rows,
                                                  preferred_tags=preferred_tags,
                                                  finalist_tags=finalist_tags),
                                progress=say, worker=self.worker)

    def close(self):
        self.worker.close()


def test_the_command_line_shows_and_saves_what_finished_when_a_worker_runs_out_of_memory(
        tmp_path, monkeypatch, capsys):
    """A GPU short of memory (the H100 with 2 GiB free): fwd's engine worker dies out of
    GPU memory in its third config. The command prints every table of what finished (the
    legacy rows, PyTorch's picks, the configs that ran), saves it marked incomplete, says
    in one line what is missing and why, and exits 3."""
    from cudnn_explorer.cli.main import main
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.jobs import explore as job
    from cudnn_explorer.measure import pipeline
    from fakes import OOM_LINE

    bench = ShortOfMemoryBench(tmp_path, monkeypatch)
    monkeypatch.setattr(job, "explore", lambda problem, options, progress, **kw:
                        pipeline.explore(problem, options, progress, bench=bench))
    out = tmp_path / "r.json"
    code = main(["--shape", "8,64,28,28", "--dtype", "float16", "--layout", "nhwc",
                 "--direction", "fwd,bwd-data", "--budget-ms", "5", "--json", str(out),
                 "--no-store", "--quiet"])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 3 and len(lines) == 1, captured.err
    assert lines[0] == (
        "cudnn_explorer: error: fwd: engine configs: engine worker for fwd ran out of GPU "
        "memory in ConvFwd_eng2: the worker process died running, timing and checking it "
        f"(exit code 1); {OOM_LINE}; the 2 that ran are kept; results kept for fwd, "
        f"bwd-data, shown and saved in '{out}' (\"complete\": false)")
    saved = Exploration.from_json(out.read_text())
    assert not saved.complete
    fwd, bwd = saved.directions
    assert [(c.tag, c.status) for c in fwd.engines.configs] == [
        ("ConvFwd_eng0", "OK"), ("ConvFwd_eng1", "OK"), ("ConvFwd_eng2", "crashed")]
    assert fwd.find and fwd.pytorch and fwd.error.startswith("engine configs: ")
    assert not bwd.error and [c.status for c in bwd.engines.configs] == ["OK"] * 3
    # the tables are those of the saved result: the legacy rows, PyTorch's picks, the
    # configs that ran and the summary, then what did not finish
    assert captured.out == render_exploration(saved)
    text = " ".join(captured.out.split())
    for shown in ("IMPLICIT_PRECOMP_GEMM", "PyTorch", "best engine config: ConvFwd_eng0",
                  "1 hung or crashed the worker process (recorded, the search stopped: see "
                  "'not finished')",
                  "not finished: engine configs: engine worker for fwd ran out of GPU memory",
                  "== summary"):
        assert shown in text, shown


class NoContextBench(FakeBench):
    """The engine worker dies before its first config, out of GPU memory without a figure
    (its CUDA context did not fit); 1,400 MiB are free once it has ended."""

    def free_bytes(self):
        return 1400 * 2**20

    def engines(self, *args, **kw):
        from cudnn_explorer.core.errors import ResourceError

        raise ResourceError("engine worker for fwd failed (exit code 1): RuntimeError: CUDA "
                            "error: out of memory")


def test_a_worker_out_of_memory_without_a_figure_says_what_was_free_after_it(tmp_path,
                                                                              monkeypatch):
    from cudnn_explorer.measure.pipeline import explore

    opts = ExploreOptions.create(directions="fwd", budget_ms=5, child_timeout_s=30,
                                 engine_budget_s=30)
    (fwd,) = explore(P, opts, bench=NoContextBench(tmp_path, monkeypatch)).directions
    assert fwd.engines is None and fwd.best() is not None
    assert fwd.error == ("engine configs: engine worker for fwd failed (exit code 1): "
                         "RuntimeError: CUDA error: out of memory (1400 MiB free on GPU 0 "
                         "once the worker had ended)")
