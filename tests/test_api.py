"""The Python API of the jobs (explore, sweep_model, advise, capture) on the CPU, through
the fake native layer: they return the records the command line renders, keep what
finishes in the results store, and validate their arguments by name."""
import gzip
import json
import logging
import os
import stat

import pytest

torch = pytest.importorskip("torch")

import cudnn_explorer as ce  # noqa: E402
from conftest import REPO, requires_ext  # noqa: E402
from cudnn_explorer.core.advice import Advice  # noqa: E402
from cudnn_explorer.core.errors import UserError  # noqa: E402
from cudnn_explorer.core.exploration import Exploration  # noqa: E402
from cudnn_explorer.core.model_sweep import ModelSweep  # noqa: E402
from cudnn_explorer.report.advice import render_advice  # noqa: E402
from cudnn_explorer.report.model import render_sweep  # noqa: E402
from cudnn_explorer.store.db import Store  # noqa: E402
from fakes import FIX, FakeBench  # noqa: E402

OPTS = ce.ExploreOptions.create(budget_ms=5, child_timeout_s=30, engine_budget_s=30,
                                directions="fwd")
TINY = ("import torch\n"
        "def tiny():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),\n"
        "                               torch.nn.Conv2d(8, 8, 3, padding=1),\n"
        "                               torch.nn.Conv2d(8, 8, 3, padding=1))\n")


def test_the_jobs_are_the_packages_api_and_import_leanly():
    from cudnn_explorer import advise, explore, sweep_model  # noqa: F401

    assert {"explore", "sweep_model", "advise", "capture", "ModelSpec"} <= set(ce.__all__)
    for name in ("explore", "sweep_model", "advise", "capture"):
        assert getattr(ce, name).__doc__ and callable(getattr(ce, name))
    import subprocess
    import sys

    code = ("import sys, cudnn_explorer as ce; from cudnn_explorer import explore, "
            "sweep_model, advise; print('torch' in sys.modules)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.strip() == "False", r.stderr


@requires_ext
def test_a_direction_that_did_not_finish_is_not_kept_in_the_store(tmp_path, monkeypatch):
    """Out of memory or a GPU fault is this moment's, not the problem's: the store keeps the
    finished directions only, and a later run measures the others again."""
    from test_pipeline import FindFailsBench

    from cudnn_explorer.measure import pipeline

    bench = FindFailsBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    p = ce.ConvProblem.create("8,64,28,28", dtype="float16", layout="nhwc")
    opts = OPTS.updated(directions=("fwd", "bwd-data"))
    db = tmp_path / "s.db"
    exp = ce.explore(p, opts, store=str(db), bench=bench)
    assert [bool(d.error) for d in exp.directions] == [False, True]
    with Store(str(db)) as store:
        assert store.count() == 1
        assert store.lookup(p, exp.environment, opts) is None  # not every direction
        kept = store.lookup(p, exp.environment, opts, partial=True)
        assert [d.direction for d in kept.directions] == ["fwd"]
    calls = len(bench.calls)
    again = ce.explore(p, opts, store=str(db), bench=FakeBench(tmp_path, monkeypatch))
    assert [bool(d.error) for d in again.directions] == [False, False]
    assert len(bench.calls) == calls


@requires_ext
def test_explore_returns_an_exploration_and_answers_a_repeat_from_the_store(
        tmp_path, monkeypatch, caplog):
    from cudnn_explorer.measure import pipeline

    bench = FakeBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    p = ce.ConvProblem.create("8,64,28,28", dtype="float16", layout="nhwc")
    db = tmp_path / "s.db"
    exp = ce.explore(p, OPTS, store=str(db), bench=bench)
    assert isinstance(exp, Exploration) and [d.direction for d in exp.directions] == ["fwd"]
    assert exp.direction("fwd").best().algo_name == "WINOGRAD_NONFUSED"
    with Store(str(db)) as store:
        assert store.count() == 1
    calls = len(bench.calls)
    with caplog.at_level(logging.INFO, logger="cudnn_explorer"):
        again = ce.explore(p, OPTS, store=str(db), bench=bench)
    assert len(bench.calls) == calls  # nothing measured again
    assert again.to_dict()["directions"] == exp.to_dict()["directions"]
    assert "answered from the results store" in caplog.text
    seen = []
    ce.explore(p, OPTS, store=str(db), refresh=True, bench=bench,
               notify=lambda kind, text: seen.append(kind),
               on_direction=lambda env, m, d: seen.append(d.direction))
    assert len(bench.calls) > calls and seen == ["fwd"]
    with pytest.raises(UserError, match="either options or keywords"):
        ce.explore(p, OPTS, budget_ms=3)
    with pytest.raises(UserError, match="store 5: valid"):
        ce.explore(p, OPTS, store=5, bench=bench)


@requires_ext
def test_a_tiny_model_swept_end_to_end_from_a_factory(tmp_path, monkeypatch):
    """capture() on the CPU, then sweep_model() through the fake bench, into a store and a
    file after every problem; the sweep renders as the CLI renders it, and a second sweep
    answers every problem from the store."""
    (tmp_path / "tinyapi.py").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    cap = ce.capture("tinyapi:tiny", device="cpu", batch=2, input_shape=(3, 8, 8), train=False)
    assert len(cap.problems) == 2 and cap.model.factory == "tinyapi:tiny"
    assert [sorted(u.calls.items()) for u in cap.problems] == [[("fwd", 1)], [("fwd", 2)]]
    bench = FakeBench(tmp_path, monkeypatch)
    saved, steps = [], []
    db = str(tmp_path / "m.db")
    opts = ce.ExploreOptions.create(budget_ms=5, child_timeout_s=30, engine_budget_s=30)
    sw = ce.sweep_model(cap, opts, store=db, bench=bench, save=saved.append,
                        progress=lambda done, total, msg: steps.append((done, total)))
    assert isinstance(sw, ModelSweep) and sw.complete and len(saved) == 3
    assert sw.profile == "quick" and sw.options["budget_ms"] == 10.0  # the profile's
    assert sw.options["engine_sampling"] is False
    # PyTorch's run of the model leaves out benchmark with every candidate timed
    assert sw.options["every_candidate_mode"] is False
    # Note [model legacy rows]: Find under PyTorch's math type only, and the report says so
    assert sw.options["every_math_type"] is False
    assert "legacy rows: Find under PyTorch's math type; engine configs: those" in \
        " ".join(render_sweep(sw).split())
    assert (2, 2) in steps and all(t == 2 for _, t in steps)
    assert [e.exploration.directions[0].direction for e in sw.entries] == ["fwd", "fwd"]
    assert render_sweep(ModelSweep.from_json(sw.to_json())) == render_sweep(sw)
    rows = [{"problem": e.index + 1, "direction": d.direction, "calls": cap.problems[
        e.index].calls[d.direction], "pytorch_ms": d.pick_ms(d.pytorch_pick("benchmark"))}
        for e in sw.entries for d in e.exploration.directions]
    assert [r["calls"] for r in rows] == [1, 2] and all(r["pytorch_ms"] for r in rows)
    measured = len(bench.calls)
    again = ce.sweep_model(cap, opts, store=db, bench=bench)
    assert len(bench.calls) == measured and again.complete
    kept = ce.sweep_model(cap, opts, profile="thorough", keep=("budget_ms",), bench=bench)
    assert kept.profile == "thorough" and kept.options["budget_ms"] == 5.0
    assert kept.options["every_candidate_mode"] is True
    assert kept.options["every_math_type"] is True
    assert "legacy rows: Find" not in render_sweep(kept)
    with pytest.raises(UserError, match="--profile fast: valid: quick, thorough"):
        ce.sweep_model(cap, opts, profile="fast", bench=bench)
    with pytest.raises(UserError, match="batch 0: valid"):
        ce.sweep_model("tinyapi:tiny", opts, batch=0, bench=bench)


def test_advise_assembles_the_advice_from_the_runs(tmp_path, monkeypatch):
    """advise() with the model's runs replaced by a saved H200 advice's: the Advice it
    returns is that workload's, and renders as the saved one does."""
    from cudnn_explorer.jobs import sweep as job  # SweepRun starts and captures
    from cudnn_explorer.measure import pipeline
    from cudnn_explorer.model import run_modes

    saved = Advice.from_json(gzip.decompress(open(os.path.join(
        FIX, "advice_r50_b16_dist80_h200.json.gz"), "rb").read()))
    seen, order = {}, []

    class Starts:  # the modes' processes, started before the capture
        def __init__(self, spec, options, plans, graph, modes):
            order.append(("started", [m.label for m in modes], plans, graph))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            order.append("closed")

        def close(self):
            order.append("closed")

    def run_model(cap, options, timing, modes, progress, cache, share, started):
        assert isinstance(started, Starts)
        seen.update(modes=[m.label for m in modes], target_ci=timing.target_ci,
                    graph=timing.graph)
        return saved.pytorch_run, {}

    def capture(spec, device, notify):
        order.append("capture")
        return saved.capture

    monkeypatch.setattr(job, "mode_starts", Starts)
    monkeypatch.setattr(job, "capture", capture)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: saved.environment)
    monkeypatch.setattr(run_modes, "run_model", run_model)
    adv = ce.advise(saved.capture.model, iterations=saved.iterations,
                    sizes=[tuple(s) for s in saved.sizes], target_ci=0.01)
    assert isinstance(adv, Advice) and adv.decidable
    assert adv.sizes == saved.sizes and adv.iterations == saved.iterations
    assert seen == {"modes": ["benchmark", "heuristics (benchmark off)", "deterministic"],
                    "target_ci": 0.01, "graph": True}
    assert order[:2] == [("started", seen["modes"], False, True), "capture"]
    assert order[2:] and set(order[2:]) == {"closed"}
    strip = lambda t: t.split("\n", 3)[3]  # noqa: E731  (the header names the date)
    assert strip(render_advice(adv)) == strip(render_advice(saved))
    for kw, match in [(dict(iterations=0), "iterations 0: valid"),
                      (dict(repeats=1), "repeats 1: valid"),
                      (dict(target_ci=2.0), "target_ci 2.0: valid")]:
        with pytest.raises(UserError, match=match):
            ce.advise("resnet50", **kw)


def test_sweep_model_starts_the_modes_processes_before_the_capture(monkeypatch):
    """Note [model children started ahead] and Note [engine worker started ahead]:
    PyTorch's mode processes (and the pinned mode's, with a plan file) and the engine
    worker start before the model is captured, go to the sweep, and are closed when it
    returns or fails; a fake bench (no PyTorch run) starts none, and options without
    engine configs start no worker."""
    from cudnn_explorer.jobs import sweep as job

    order = []

    class Starts:
        def __init__(self, spec, options, plans):
            order.append(("started", spec.name, plans))

        def close(self):
            order.append("closed")

    class Worker:
        def close(self):
            order.append("worker closed")

    def worker_ahead(options):
        order.append("worker started")
        return Worker() if options.engines else None

    def capture(spec, device, notify, progress=None):
        order.append("capture")
        return "the capture"

    def swept(run, save=None):
        cap = run.capture()
        order.append(("swept", cap, isinstance(run.starts, Starts),
                      isinstance(run.worker, Worker)))
        if cap == "fail":
            raise KeyboardInterrupt
        return "the sweep"

    monkeypatch.setattr(job, "mode_starts", Starts)
    monkeypatch.setattr(job, "worker_ahead", worker_ahead)
    # (a GPU host would set the stand-in Starts up: tested on its own in test_model_sweep)
    monkeypatch.setattr(job, "set_up_ahead", lambda starts, spec, options: False)
    monkeypatch.setattr(job, "capture", capture)
    monkeypatch.setattr(job.SweepRun, "sweep", swept)
    assert job.sweep_model("resnet18", batch=2) == "the sweep"
    assert order == [("started", "resnet18", False), "worker started", "capture",
                     ("swept", "the capture", True, True), "closed", "worker closed"]
    order.clear()
    monkeypatch.setattr(job, "capture", lambda spec, device, notify, progress=None: "fail")
    with pytest.raises(KeyboardInterrupt):
        job.sweep_model("resnet18", batch=2)
    assert order == [("started", "resnet18", False), "worker started",
                     ("swept", "fail", True, True), "closed", "worker closed"]
    order.clear()
    monkeypatch.setattr(job, "capture", capture)
    job.sweep_model("resnet18", batch=2, bench=object())
    assert order == ["capture", ("swept", "the capture", False, False)]
    order.clear()
    job.sweep_model("resnet18", ce.ExploreOptions.create(engines=False), batch=2)
    assert order == [("started", "resnet18", False), "worker started", "capture",
                     ("swept", "the capture", True, False), "closed"]
    order.clear()  # with a plan file: the pinned mode's process too
    from cudnn_explorer.jobs import plans as plans_job

    monkeypatch.setattr(plans_job, "check_pinned_args", lambda path, uncovered: None)
    job.sweep_model("resnet18", batch=2, plans="resnet18.plans.json")
    assert order == [("started", "resnet18", True), "worker started", "capture",
                     ("swept", "the capture", True, True), "closed", "worker closed"]


def test_a_sweep_hands_the_worker_started_ahead_to_its_bench(monkeypatch):
    """Note [engine worker started ahead]: the worker started before the capture is the
    one the problems' bench uses, with PyTorch's run (ModelBench) or without it."""
    from cudnn_explorer.jobs import sweep as job
    from cudnn_explorer.measure import pipeline
    from cudnn_explorer.model import explore_problems as model_sweep
    from types import SimpleNamespace

    from cudnn_explorer.model.run_modes import ModelBench

    worker = object()
    seen = []
    monkeypatch.setattr(pipeline, "environment", lambda device=0: "env")

    def run_modes(run):  # PyTorch's run of the model, its picks for the bench
        run._picks = (None, {})

    monkeypatch.setattr(job.SweepRun, "run_modes", run_modes)
    monkeypatch.setattr(model_sweep, "sweep",
                        lambda cap, options, bench, **kw: seen.append(bench) or "swept")
    cap = SimpleNamespace(problems=[1], model=None)
    for pytorch in (True, False):
        opts = ce.ExploreOptions.create(pytorch=pytorch)
        run = job.SweepRun(cap, opts, job.SweepSettings(), start=False)
        run.cap, run.worker = cap, worker  # the capture made, the worker started ahead
        assert run.sweep() == "swept"
        assert isinstance(seen[-1], pipeline.GpuBench) and seen[-1].worker is worker
        assert isinstance(seen[-1], ModelBench) == pytorch


def test_explore_starts_its_processes_before_the_extension_check(monkeypatch):
    """Note [children started ahead]: the explore job starts PyTorch's children and the
    engine worker before it asks the extension whether it has cudnn-frontend (which
    imports torch), hands the bench to the pipeline, and closes it when the pipeline
    returns or fails; a caller's bench is the caller's."""
    from types import SimpleNamespace as NS

    from cudnn_explorer.jobs import explore as job
    from cudnn_explorer.jobs import lazy_measure

    order = []
    ok, fail = (ce.ConvProblem.create(shape=[2, 4, 8, w]) for w in (8, 9))

    class Bench:
        def __init__(self, device):
            order.append(("bench", device))

        def prestart(self, problem, options):
            order.append(("prestart", options.engines))

        def close(self):
            order.append("closed")

    def explore(problem, options, progress=None, on_direction=None, bench=None):
        order.append(("explore", options.engines, type(bench).__name__))
        if problem == fail:
            raise KeyboardInterrupt
        return "the exploration"

    fake = NS(GpuBench=Bench, explore=explore)
    monkeypatch.setattr(lazy_measure, "measuring", lambda: fake)
    monkeypatch.setattr(lazy_measure, "frontend_built",
                        lambda device: order.append("checked") or False)
    opts = ce.ExploreOptions.create(device=1)
    assert job.explore(ok, opts, skip_engines_if_unbuilt=True) == "the exploration"
    assert order == [("bench", 1), ("prestart", True), "checked", ("explore", False, "Bench"),
                     "closed"]
    order.clear()
    with pytest.raises(KeyboardInterrupt):
        job.explore(fail, opts)
    assert order == [("bench", 1), ("prestart", True), ("explore", True, "Bench"), "closed"]
    order.clear()
    mine = Bench(0)
    job.explore(ok, opts, bench=mine, skip_engines_if_unbuilt=True)
    assert order == [("bench", 0), ("explore", True, "Bench")]  # neither started nor closed


def test_the_atomic_writer_keeps_the_users_umask(tmp_path):
    from cudnn_explorer.core.files import write_atomic

    old = os.umask(0o027)
    try:
        write_atomic(str(tmp_path / "a.json"), json.dumps({"a": 1}))
    finally:
        os.umask(old)
    mode = stat.S_IMODE(os.stat(tmp_path / "a.json").st_mode)
    assert mode == 0o640 and json.loads((tmp_path / "a.json").read_text()) == {"a": 1}
    write_atomic(str(tmp_path / "b.json.gz"), "x", compress=True)
    assert gzip.decompress((tmp_path / "b.json.gz").read_bytes()) == b"x"
    assert [p.name for p in tmp_path.iterdir()] and not [
        p for p in tmp_path.iterdir() if p.name.startswith(".cudnn_explorer")]
    with pytest.raises(OSError):
        write_atomic(str(tmp_path / "missing" / "c.json"), "x")


@requires_ext
def test_an_exploration_records_where_its_wall_time_went(tmp_path, monkeypatch):
    """PyTorch's processes, and per direction the legacy rows and the engine configs
    (a staged search's rounds among them): recorded, saved, read back and rendered."""
    from cudnn_explorer.measure import pipeline
    from cudnn_explorer.report.tables import wall_lines

    bench = FakeBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    p = ce.ConvProblem.create("8,64,28,28", dtype="float16", layout="nhwc")
    exp = ce.explore(p, OPTS.updated(staged=True), bench=bench)
    d = exp.direction("fwd")
    assert exp.wall_s >= exp.pytorch_wall_s > 0
    assert d.legacy_wall_s >= 0 and d.engines_wall_s >= 0
    assert [r["round"] for r in d.engines.rounds] == [1, 2, "final"]
    again = Exploration.from_json(exp.to_json())
    assert (again.wall_s, again.pytorch_wall_s) == (exp.wall_s, exp.pytorch_wall_s)
    assert exp.wall_s >= exp.setup_s + exp.pytorch_wall_s and again.setup_s == exp.setup_s
    # each of PyTorch's processes: its wait, its run and the phases the child measured
    assert [c.label for c in again.pytorch_children] == [
        "benchmark", "benchmark, limit 0 (all)", "heuristics (benchmark off)",
        "deterministic", "legacy API, benchmark"]
    assert again.pytorch_children == exp.pytorch_children
    for c in exp.pytorch_children:
        # the fake child's phases are canned (0.3 ms), its run takes more
        assert c.ready_wait_s >= 0 and c.run_s > 0
        assert sum(c.phases_s.values()) == pytest.approx(0.0003)
    lines = wall_lines(again)
    assert lines[0] == f"wall time: {exp.wall_s:.1f} s"
    assert lines[1].startswith("  setup (children started; torch imported and CUDA started")
    assert "PyTorch's fresh processes" in lines[2]
    assert lines[3].startswith("    benchmark: waited ") and \
        ": cuda 0.0, tensors 0.0, first calls 0.0, checks 0.0, kernels 0.0, steady 0.0, " \
        "the rest (its start and end) " in lines[3]
    assert lines[8].startswith("  fwd: legacy rows ") and "engine configs" in lines[8]
    assert "round 1 " in lines[8] and "finalists " in lines[8]
    old = exp.to_dict()
    for key in ("setup_s", "pytorch_children"):  # a file saved before they were recorded
        del old[key]
    assert wall_lines(Exploration.from_dict(old))[1].startswith("  PyTorch's fresh")
    del old["wall_s"], old["pytorch_wall_s"]
    assert wall_lines(Exploration.from_dict(old)) == []  # a file saved before


@pytest.mark.parametrize("call,match", [
    (lambda: ce.advise("resnet18", sizes=[(0, 1)]), r"sizes\[0\] \[0, 1\]: size 0: valid"),
    (lambda: ce.advise("resnet18", sizes=[(224, float("nan"))]), "count nan: valid"),
    (lambda: ce.advise("resnet18", sizes=[(224, -1)]), "count -1: valid: a number > 0"),
    (lambda: ce.advise("resnet18", sizes=[(224, 1), (224, 2)]), "size 224 is listed twice"),
    (lambda: ce.advise("resnet18", sizes=[(224, 1, 2)]), "expected a \\(size, count\\) pair"),
    (lambda: ce.advise("resnet18", sizes="224"), "valid: a list of \\(size, count\\) pairs"),
    (lambda: ce.advise("resnet18", sizes=[]), "sizes: no sizes"),
    (lambda: ce.advise("resnet18", options="quick"), "options str: valid: an ExploreOptions"),
    (lambda: ce.advise("resnet18", store=5), "store 5: valid"),
    (lambda: ce.sweep_model("resnet18", options=3), "options int: valid"),
    (lambda: ce.sweep_model("resnet18", iterations=0), "iterations 0: valid"),
    (lambda: ce.sweep_model("resnet18", uncovered="maybe"), "uncovered 'maybe': valid"),
    (lambda: ce.sweep_model("resnet18", keep="budget_ms"), "keep 'budget_ms': valid"),
    (lambda: ce.sweep_model("resnet18", keep=["budget"]), "keep \\['budget'\\]: valid"),
    (lambda: ce.sweep_model("resnet18", store=3.5), "store 3.5: valid"),
    (lambda: ce.sweep_model("resnet18", plans=ce.ExploreOptions.create()),
     "plans ExploreOptions: give a plan file's path"),
    (lambda: ce.capture("resnet18", device="tpu"), "device 'tpu': valid"),
    (lambda: ce.explore("32,3,224,224"), "problem str: valid: a ConvProblem"),
    (lambda: ce.explore(ce.ConvProblem.create(shape=[2, 4, 8, 8]), options=3),
     "options int: valid: an ExploreOptions"),
])
def test_bad_job_arguments_are_refused_before_any_gpu_work(call, match, monkeypatch):
    """Each is the caller's mistake, named, before the GPU is looked for (without one
    here, the GPU check would answer MissingDependencyError instead)."""
    from cudnn_explorer.jobs import lazy_measure

    def reached():
        raise AssertionError("reached the GPU")
    monkeypatch.setattr(lazy_measure, "measuring", reached)
    with pytest.raises(UserError, match=match):
        call()


def test_saved_file_arguments_are_paths_and_filters_are_texts():
    from cudnn_explorer.jobs.plans import write_plans

    ref = os.path.join(REPO, "data", "reference", "h200-default-fp32.json")
    with pytest.raises(UserError, match="give a file's path"):
        write_plans(3)  # not file descriptor 3
    with pytest.raises(UserError, match=r"gpus \[3\]: valid: a list of texts"):
        write_plans(ref, gpus=[3])
    assert write_plans(ref, gpus="H200").entries  # one text: the filter, not its letters


def test_a_misspelt_model_is_the_users_mistake_before_the_gpu_is_asked(tmp_path, monkeypatch):
    """capture() for a GPU names a model that does not exist (torchvision's, a factory, an
    --inputs function) as a UserError (exit 2) before it asks for the GPU, so a machine
    without one says the same; the GPU is asked only once the names resolve."""
    from cudnn_explorer.core.errors import GpuError
    from cudnn_explorer.measure import native

    asked = []

    def no_gpu(device):
        asked.append(device)
        raise GpuError("no usable CUDA GPU (test)")

    monkeypatch.setattr(native, "require_gpu", no_gpu)
    (tmp_path / "tinyapi.py").write_text(TINY)
    monkeypatch.syspath_prepend(str(tmp_path))
    for model, kw, match in (("resnet5", {}, "unknown model 'resnet5'; close names: resnet50"),
                             ("tinyapi:nosuch", {}, "tinyapi has no callable nosuch"),
                             ("nosuchmodule:f", {}, "cannot import nosuchmodule"),
                             ("resnet18", {"inputs": "tinyapi:nosuch"},
                              "--inputs 'tinyapi:nosuch': tinyapi has no callable nosuch")):
        with pytest.raises(UserError, match=match):
            ce.capture(model, device="cuda:0", **kw)
    assert asked == []
    for model in ("resnet18", "tinyapi:tiny"):
        with pytest.raises(GpuError, match="test"):
            ce.capture(model, device="cuda:0")
    assert asked == [0, 0]


def test_the_reader_never_waits_on_a_pipe_nor_reads_a_device_forever(tmp_path):
    """A named pipe with no writer answers at once (no data), a pipe with one (a shell's
    <(gzip -c x.json)) reads whole, a device (/dev/zero) and a NUL in the path are
    refused in one line."""
    import subprocess
    import sys

    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.core.files import read_bytes

    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    with pytest.raises(UserError, match="fifo': a named pipe that nothing wrote to"):
        read_bytes(fifo, "plan file")
    src = tmp_path / "a.json"
    src.write_text('{"a": 1}')
    code = ("import sys; from cudnn_explorer.core.files import read_bytes; "
            "sys.stdout.write(read_bytes(sys.argv[1], 'x').decode())")
    out = subprocess.run(["bash", "-c", f'"$0" -c "$1" <(gzip -c "$2")', sys.executable, code,
                          str(src)], capture_output=True, text=True, timeout=60,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert out.returncode == 0 and out.stdout == '{"a": 1}', out.stderr
    with pytest.raises(UserError, match="'/dev/zero': not a regular file"):
        read_bytes("/dev/zero", "plan file")
    with pytest.raises(UserError, match=r"'a\\x00b': not a path \(a NUL character\)"):
        read_bytes("a\x00b", "plan file")


def test_yes_no_keywords_take_only_booleans_and_model_keywords_are_named():
    """"no" is true to Python: pin(strict="no") would have pinned strictly. Every yes/no
    keyword of the API takes True or False only; an unknown model keyword is named."""
    import torch

    import cudnn_explorer as ce
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.pinning.op import pin_counts

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    for call, match in [(lambda: ce.pin(net, "p.json", strict="no"), "strict 'no'"),
                        (lambda: ce.pin(net, "p.json", allow_environment=1), "allow_environment 1"),
                        (lambda: ce.pinned("p.json", strict="no").__enter__(), "strict 'no'"),
                        (lambda: pin_counts(reset="no"), "reset 'no'"),
                        (lambda: ce.ModelSpec.create("resnet50", train="no"), "train 'no'"),
                        (lambda: ce.ModelSpec.create("resnet50", channels_last=0), "channels_last 0"),
                        (lambda: ce.advise("resnet50", graph="no"), "graph 'no'"),
                        (lambda: ce.advise("resnet50", target_ci="0.01"), "target_ci '0.01'"),
                        (lambda: ce.sweep_model("resnet50", foo=1), "foo: not a model keyword"),
                        # a callback that is no function: said before the work, not after
                        (lambda: ce.sweep_model("resnet50", save=5), "save 5: give a function"),
                        (lambda: ce.explore(ce.ConvProblem.create("1,3,8,8", kernel=3),
                                            progress=5), "progress 5: give a function"),
                        (lambda: ce.tune("x.json", progress=5), "progress 5: give a function")]:
        with pytest.raises(UserError, match=match):
            call()
    assert type(net[0]) is torch.nn.Conv2d  # refused before anything was pinned


def test_prebuild_says_what_is_wrong_with_its_arguments():
    """prebuild's own arguments (kwargs, backward) and inputs the forward does not take are
    one UserError naming them; on a CPU model it runs and counts nothing pinned."""
    import torch

    import cudnn_explorer as ce
    from cudnn_explorer.core.errors import UserError

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3))
    x = torch.randn(1, 3, 8, 8)
    for call, match in [(lambda: ce.prebuild(net, [x], kwargs=[1]), "kwargs \\[1\\]: give a dict"),
                        (lambda: ce.prebuild(net, [x], backward="no"), "backward 'no'"),
                        (lambda: ce.prebuild(net, [x, x]), "example_inputs \\(2 positional, 0 "
                                                           "keyword\\) do not fit Sequential.forward")]:
        with pytest.raises(UserError, match=match):
            call()
    assert ce.prebuild(net, [x]).pinned_calls == 0 and net[0].weight.grad is None


def test_numpy_booleans_and_reals_are_taken_and_refresh_is_a_yes_no():
    import numpy as np

    import cudnn_explorer as ce
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.core.options import flag

    assert flag(np.True_, "x") is True and flag(np.bool_(False), "x") is False
    p = ce.ConvProblem.create("1,3,8,8", kernel=3)
    for call, match in [(lambda: ce.explore(p, store=True, refresh="no"), "refresh 'no'"),
                        (lambda: ce.explore(p, skip_engines_if_unbuilt="no"),
                         "skip_engines_if_unbuilt 'no'")]:
        with pytest.raises(UserError, match=match):
            call()
    with pytest.raises(ce.ExplorerError) as e:  # a float32 fraction passes the check
        ce.advise("resnet50", target_ci=np.float32(0.01))
    assert "target_ci" not in str(e.value)


def test_a_pathlib_path_pins_as_its_string_does_and_a_missing_direction_is_named(tmp_path):
    import pathlib

    import torch

    import cudnn_explorer as ce
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.core.problem import ConvProblem
    from fakes import exploration
    from tests.pinning_helpers import entry

    plans = tmp_path / "p.json"
    p = ConvProblem.create("2,3,8,8", out_channels=4, kernel=3, padding=1)
    plans.write_text(PlanFile(environment=PlanEnvironment(),
                              entries=[entry(p, "fwd", "ConvFwd_eng0")]).to_json())
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1))
    try:
        report = ce.pin(net, pathlib.Path(plans), allow_environment=True, ahead=False, keep=False)
        assert report.plans == 1 and report.source == str(plans)
    finally:
        ce.unpin(net)
    exp = exploration()
    missing = next(d for d in ("fwd", "bwd-data", "bwd-filter")
                   if d not in {r.direction for r in exp.directions})
    with pytest.raises(KeyError, match=f"'{missing}': not measured here; measured: "):
        exp.direction(missing)
