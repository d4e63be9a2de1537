"""A model sweep on the CPU: capture a small model, explore its unique problems through the
fake bench (real child processes, the real engine driver), save after every problem, and
render the per-iteration report, also from the saved file and after an interruption."""
import dataclasses
import json
import os

import pytest

torch = pytest.importorskip("torch")

from conftest import requires_ext, run_cli  # noqa: E402
from cudnn_explorer.core.capture import ModelSpec  # noqa: E402
from cudnn_explorer.core.errors import UserError  # noqa: E402
from cudnn_explorer.core.options import ExploreOptions  # noqa: E402
from cudnn_explorer.core.model_sweep import ModelSweep  # noqa: E402
from cudnn_explorer.model.tracer import capture  # noqa: E402
from cudnn_explorer.report.model import render_capture, render_sweep  # noqa: E402
from fakes import FakeBench  # noqa: E402

pytestmark = requires_ext  # the engine driver builds native TimingOptions (no GPU needed)


def small_capture():
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1),
                              torch.nn.Conv2d(8, 8, 3, padding=1),
                              torch.nn.Conv2d(8, 8, 3, padding=1))
    spec = ModelSpec(name="tiny", input_shape=[3, 8, 8], batch=2)
    return capture(net, [torch.randn(2, 3, 8, 8)], spec, "cpu")


OPTS = ExploreOptions.create(budget_ms=5, child_timeout_s=30, engine_budget_s=30)


def test_sweep_saves_after_every_problem_and_reports_per_iteration(tmp_path, monkeypatch):
    from cudnn_explorer.model.explore_problems import sweep

    cap = small_capture()
    assert [sorted(u.calls.items()) for u in cap.problems] == [
        [("bwd-filter", 1), ("fwd", 1)],
        [("bwd-data", 2), ("bwd-filter", 2), ("fwd", 2)]]
    saved = []
    bench = FakeBench(tmp_path, monkeypatch)
    sw = sweep(cap, OPTS, save=lambda s: saved.append(s.to_json()), bench=bench)
    assert len(saved) == 3 and sw.complete and sw.missing == []
    assert bench.closed == 1  # its engine worker ended with the sweep
    first = ModelSweep.from_json(saved[0])
    assert [e.index for e in first.entries] == [0] and not first.complete
    assert [d.direction for d in sw.entry(0).exploration.directions] == ["fwd", "bwd-filter"]
    again = ModelSweep.from_json(sw.to_json())
    text = render_sweep(again)
    assert text == render_sweep(sw)
    assert all(len(line) <= 120 for line in text.splitlines()), text
    assert "== model totals (5 of 5 problem-directions" in text
    # where the explorations' wall time went, summed over the directions measured here
    said = " ".join(text.split())
    assert "(the capture and PyTorch's own run of the model not included): 5 directions " \
           "measured here: legacy rows " in said and "; the rest " in said, text
    assert "left on the table" in text and "where PyTorch leaves the most time" in text
    # ms per iteration = median per call x calls per iteration
    d = sw.entry(1).exploration.direction("fwd")
    pick = d.pytorch_pick("benchmark", api=None).time
    assert f"{pick * 2:.4f}" in text
    # each mode's picks weighted by calls, summed where every mode has a time
    want = {m: sum(u.calls[x.direction] * x.pick_timing(x.pytorch_pick(m, api=None)).median_ms
                   for i, u in enumerate(cap.problems)
                   for x in sw.entry(i).exploration.directions)
            for m in ("benchmark", "heuristic", "deterministic")}
    assert (f"(5 of 5 problem-directions where every mode's pick has a time): benchmark "
            f"{want['benchmark']:.3f} ms, heuristics (benchmark off) {want['heuristic']:.3f} ms"
            in " ".join(text.split())), text


def test_where_the_time_went_leaves_out_what_the_store_answered(tmp_path, monkeypatch):
    from cudnn_explorer.model.explore_problems import StoredProblems, sweep

    cap = small_capture()
    first = sweep(cap, OPTS, bench=FakeBench(tmp_path, monkeypatch))
    stored = {u.problem: first.entry(i).exploration for i, u in enumerate(cap.problems)}
    # the walls a stored answer carries were recorded when it was measured
    slow = {p: dataclasses.replace(e, directions=[dataclasses.replace(d, legacy_wall_s=5.0)
                                                  for d in e.directions])
            for p, e in stored.items()}
    again = sweep(cap, OPTS, bench=FakeBench(tmp_path, monkeypatch),
                  stored=StoredProblems(lambda p, o: slow[p] if p == cap.problems[1].problem
                                        else None))
    said = " ".join(render_sweep(again).split())
    assert "2 directions measured here (1 problem answered, at least in part, from the " \
           "results store left out): legacy rows " in said, said
    assert "the rest" not in said


def test_interrupted_sweep_keeps_what_finished(tmp_path, monkeypatch):
    from cudnn_explorer.model.explore_problems import sweep

    saved = []

    def save(s):
        saved.append(s)
        if len(s.entries) == 1 and not s.complete and len(saved) == 1:
            raise KeyboardInterrupt

    bench = FakeBench(tmp_path, monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        sweep(small_capture(), OPTS, save=save, bench=bench)
    assert bench.closed == 1
    last = saved[-1]
    assert [e.index for e in last.entries] == [0] and not last.complete and last.missing == [1]
    text = render_sweep(ModelSweep.from_json(last.to_json()))
    assert "incomplete sweep: 1 of 2 unique problems not explored (#2)" in text


def test_cli_renders_a_saved_sweep_and_refuses_bad_ones(tmp_path, monkeypatch):
    from cudnn_explorer.model.explore_problems import sweep

    sw = sweep(small_capture(), OPTS, bench=FakeBench(tmp_path, monkeypatch))
    f = tmp_path / "sweep.json"
    f.write_text(sw.to_json())
    r = run_cli("model", "--load", str(f))
    assert r.returncode == 0 and "model totals" in r.stdout, r.stderr
    d = json.loads(sw.to_json())
    d["entries"][1]["exploration"]["problem"]["groups"] = 3
    f.write_text(json.dumps(d))
    r = run_cli("model", "--load", str(f))
    # the file's field by its name in the file (groups), not by the command's flag
    assert r.returncode == 2 and "entries[1].exploration: problem: groups 3" in r.stderr
    r = run_cli("model", "--load", str(f), "--batch", "4")
    assert r.returncode == 2 and "--batch would be ignored" in r.stderr


def test_capture_report_fits_and_names_layers():
    text = render_capture(small_capture())
    assert "2 unique problems" in text
    assert text.splitlines()[-1].split()[-2:] == ["1,", "2"]  # the layers of problem 2
    assert all(len(line) <= 120 for line in text.splitlines())


def test_image_sets_a_square_rgb_input():
    r = run_cli("model", "resnet18", "--image", "40", "--batch", "2", "--capture-only",
                env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    assert "input 2x3x40x40" in r.stdout and "11 unique problems" in r.stdout


def test_sizes_set_the_height_and_width_of_inputs_shape(tmp_path):
    """--sizes with --input: a 1-channel image model and a video model at each size S,
    their channels (and frames) kept."""
    (tmp_path / "graynets.py").write_text(
        "import torch\n"
        "def gray():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Conv2d(4, 4, 3))\n"
        "def video():\n"
        "    return torch.nn.Conv3d(2, 4, 3)\n")
    env = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(tmp_path) + os.pathsep +
           os.environ.get("PYTHONPATH", "")}
    r = run_cli("model", "--model", "graynets:gray", "--input", "1x64x64", "--sizes", "16,24",
                "--batch", "2", "--capture-only", env=env)
    assert r.returncode == 0, r.stderr
    assert "input 2x1xSxS for S in 16, 24" in r.stdout
    assert "2x1x16x16 * 4x1x3x3" in r.stdout and "2x4x22x22 * 4x4x3x3" in r.stdout
    r = run_cli("model", "--model", "graynets:video", "--input", "2x5x9x9", "--sizes", "8,12",
                "--batch", "1", "--capture-only", env=env)
    assert r.returncode == 0, r.stderr
    assert "input 1x2x5xSxS for S in 8, 12" in r.stdout
    assert "1x2x5x8x8 * 4x2x3x3x3" in r.stdout and "1x2x5x12x12 * 4x2x3x3x3" in r.stdout


@pytest.mark.parametrize("args,match", [
    (["model"], "give a model"),
    (["model", "resnet18", "--model", "m:f"], "one of them"),
    (["model", "resnet5", "--capture-only"], "close names: resnet50"),
    (["model", "resnet18", "--amp", "fp8"], "--amp 'fp8'"),
    (["model", "resnet18", "--batch", "0"], "--batch 0"),
    (["model", "resnet18", "--input", "3x0x4"], "--input '3x0x4'"),
    (["model", "resnet18", "--input", "3x8x8", "--image", "8"], "--image would be ignored"),
    (["model", "resnet18", "--sizes", "8,16", "--image", "8"], "--image would be ignored"),
    (["model", "resnet18", "--image", "8,8"], "--image 8,8: valid: an integer from 1"),
    (["advise", "resnet18", "--image", "0x10"], "--image 0x10: valid: an integer from 1"),
    (["model", "resnet18", "--capture-only", "--budget-ms", "5"], "--budget-ms would be"),
    (["model", "--model", "nomodule:f", "--capture-only"], "cannot import nomodule"),
    (["model", "resnet18", "--profile", "fast"], "--profile fast: valid: quick, thorough"),
    (["model", "resnet18", "--timed-iterations", "0"], "--timed-iterations 0"),
    (["model", "resnet18", "--timed-iterations", "20000"], "--timed-iterations 20000: valid"),
    (["model", "resnet18", "--no-pytorch", "--timed-iterations", "5"], "--timed-iterations would be"),
    (["model", "resnet18", "--capture-only", "--profile", "thorough"], "--profile would be"),
    (["model", "resnet18", "--consistency"], "--consistency compares the GPUs of a torchrun"),
    (["model", "resnet18", "--resume", "--no-store"], "--resume needs the results store"),
])
def test_model_bad_input_is_one_line_exit_2(args, match):
    r = run_cli(*args, env={"CUDA_VISIBLE_DEVICES": ""})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and match in lines[-1], r.stderr
    assert "Traceback" not in r.stderr


def test_a_pick_whose_first_call_searched_no_plan_is_named_and_explained():
    """A problem-direction PyTorch ran without cuDNN (no plan search in its run of the
    model) reads 'no search' in the pick column, with why, not a bare '-'."""
    import gzip

    ref = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "data",
                       "reference", "h200-resnet50-b32-amp-fp16-nhwc.json.gz")
    d = json.loads(gzip.decompress(open(ref, "rb").read()))
    first = d["entries"][0]["exploration"]["directions"][0]  # conv1, fwd
    for p in first["pytorch"]:
        if p["mode"] == "benchmark":
            p.update(engine_tag=None, error="no plan search for this direction in the "
                                            "cudnn-frontend log")
    text = render_sweep(ModelSweep.from_dict(d))
    row = next(ln for ln in text.splitlines() if ln.startswith("1   fwd"))
    assert row.split()[3:5] == ["no", "search"], row
    assert "no search: 1 problem-direction(s) whose first call in PyTorch's run of the " \
           "model logged no cuDNN plan search" in " ".join(text.split())
    assert "== model totals (67 of 68 problem-directions" in text
    # where PyTorch's pick is the best engine config, the row says so (tags are cut)
    row = next(ln for ln in text.splitlines() if ln.startswith("    bwd-f  1"))
    assert "= PyTorch's" in row and "= PyTorch's: the best engine config is PyTorch's pick" \
        in text
    plain = render_sweep(ModelSweep.from_dict(json.loads(gzip.decompress(
        open(ref, "rb").read()))))
    assert "no search" not in plain


def fake_bench(job, tmp_path, monkeypatch):
    """The model command's SweepRun measures through FakeBench, its children given 30 s."""
    real = job.SweepRun

    class Faked(real):
        def __init__(self, model, options, settings, **kw):
            kw.update(bench=FakeBench(tmp_path, monkeypatch), start=False)
            super().__init__(model, options.updated(child_timeout_s=30), settings, **kw)

    monkeypatch.setattr(job, "SweepRun", Faked)


def test_cli_sweep_keeps_the_budget_the_user_gave(tmp_path, monkeypatch):
    """The model profile's budgets give way to --budget-ms and --engine-budget-s given on
    the command line, through the whole sweep (the job applies the profile again)."""
    import cudnn_explorer.jobs.sweep as job
    from cudnn_explorer.cli import model as cli

    monkeypatch.setattr(job, "capture", lambda spec, device, notify, **kw: small_capture())
    fake_bench(job, tmp_path, monkeypatch)
    out = tmp_path / "sweep.json"
    assert cli.run(["resnet18", "--batch", "2", "--budget-ms", "7", "--engine-budget-s", "20",
                    "--no-store", "--quiet", "--json", str(out)]) == 0
    options = json.loads(out.read_text())["options"]
    assert (options["budget_ms"], options["engine_budget_s"]) == (7.0, 20.0)
    assert cli.run(["resnet18", "--batch", "2", "--no-store", "--quiet", "--json", str(out)]) == 0
    options = json.loads(out.read_text())["options"]  # the quick profile's own
    assert (options["budget_ms"], options["engine_budget_s"]) == (10.0, 60.0)


def test_the_model_command_starts_pytorchs_processes_before_it_captures(tmp_path,
                                                                       monkeypatch):
    """Note [model children started ahead]: the model command starts the mode processes
    and the engine worker (Note [engine worker started ahead]) before its capture and
    hands them to the sweep; they are closed when it returns and when the capture fails;
    --capture-only starts none, --no-pytorch only the worker."""
    import cudnn_explorer.jobs.sweep as job
    from cudnn_explorer.cli import model as cli

    order = []

    class Starts:
        def __init__(self, spec, options, plans):
            order.append("started")

        def close(self):
            order.append("closed")

    class Worker:
        def close(self):
            order.append("worker closed")

    def capture(spec, device, notify, progress=None):
        order.append("capture")
        if spec.batch == 3:
            raise UserError("no such model")
        return small_capture()

    def sweep(run, save=None):
        order.append(("sweep", isinstance(run.starts, Starts), isinstance(run.worker, Worker)))
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "mode_starts", Starts)
    monkeypatch.setattr(job, "worker_ahead", lambda options: order.append("worker") or Worker())
    monkeypatch.setattr(job, "set_up_ahead", lambda starts, spec, options: order.append(
        ("set up ahead", isinstance(starts, Starts))))
    monkeypatch.setattr(job, "capture", capture)
    monkeypatch.setattr(job.SweepRun, "sweep", sweep)
    assert cli.run(["resnet18", "--batch", "2", "--no-store", "--quiet"]) == 130
    assert order == ["started", "worker", ("set up ahead", True), "capture",
                     ("sweep", True, True), "closed", "worker closed"]
    order.clear()
    with pytest.raises(UserError):
        cli.run(["resnet18", "--batch", "3", "--no-store", "--quiet"])
    assert order == ["started", "worker", ("set up ahead", True), "capture", "closed",
                     "worker closed"]
    order.clear()
    assert cli.run(["resnet18", "--batch", "2", "--capture-only", "--quiet"]) == 0
    assert order == [("set up ahead", False), "capture"]
    order.clear()
    assert cli.run(["resnet18", "--batch", "2", "--no-pytorch", "--no-store", "--quiet"]) == 130
    assert order == ["worker", ("set up ahead", False), "capture", ("sweep", False, True),
                     "worker closed"]


def test_the_first_mode_is_set_up_ahead_only_with_room_on_the_gpu(monkeypatch):
    """Note [first mode set up ahead]: set_up_ahead hands the first mode's process its
    setup (mode_runner.setup_spec, TF32 on) where PyTorch's run is on, a GPU is there,
    and AHEAD_MIN_FREE_BYTES are free on it; nothing otherwise."""
    import cudnn_explorer.jobs.sweep as job
    from cudnn_explorer.model.mode_runner import setup_spec
    from cudnn_explorer.model.run_modes import modes_of

    class Starts:
        def __init__(self):
            self.given = []

        def prepare(self, k, spec):
            self.given.append((k, spec))
            return True

    free = [job.AHEAD_MIN_FREE_BYTES]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free[0], 80 * 2**30))
    spec = ModelSpec(name="resnet18", input_shape=[3, 64, 64], batch=2)
    options = ExploreOptions.create(device=0)
    starts = Starts()
    assert job.set_up_ahead(starts, spec, options)
    assert starts.given == [(0, setup_spec(spec, modes_of(options)[0], 0, options.seed,
                                           True))]
    assert starts.given[0][1]["mode"] == "benchmark"
    free[0] -= 1
    assert not job.set_up_ahead(Starts(), spec, options)  # too little free
    free[0] += 1
    assert not job.set_up_ahead(None, spec, options)
    no_run = Starts()
    assert not job.set_up_ahead(no_run, spec, options.updated(pytorch=False))
    assert no_run.given == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not job.set_up_ahead(Starts(), spec, options)


def test_a_capture_out_of_memory_beside_the_setup_runs_again_without_it(monkeypatch):
    """Note [capture before the setup]: a capture that runs out of GPU memory while the
    first mode's process is set up ahead lets that process go and runs once more, with a
    note; it is not retried for another error, nor where no process was set up (the
    error is then the capture's own), and a second failure is the capture's own."""
    import cudnn_explorer.jobs.sweep as job
    from cudnn_explorer.core.errors import GpuMemoryError, ResourceError

    class Starts:
        def __init__(self, set_up=True):
            self.set_up, self.let = set_up, 0

        def let_go(self, k):
            assert k == 0
            self.let += 1
            ok, self.set_up = self.set_up, False
            return ok

    failures, calls, notes = [], [], []

    def capture(spec, device, notify, progress=None):
        calls.append(device)
        if failures:
            raise failures.pop(0)
        return "captured"

    monkeypatch.setattr(job, "capture", capture)
    monkeypatch.setattr(job, "set_up_ahead", lambda starts, spec, options: False)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    spec = ModelSpec(name="resnet18", input_shape=[3, 64, 64], batch=2)
    options = ExploreOptions.create()
    say = (lambda kind, msg: notes.append((kind, msg)))
    for error in (GpuMemoryError("out of GPU memory capturing x"),
                  torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB")):
        starts = Starts()
        failures[:], calls[:], notes[:] = [error], [], []
        assert job.capture_beside(starts, spec, options, "cuda:0", say) == "captured"
        assert calls == ["cuda:0", "cuda:0"] and starts.let == 1
        assert notes and notes[0][0] == "note" and "ran out of GPU memory" in notes[0][1]
    # a second failure: the capture's own
    starts = Starts()
    failures[:] = [GpuMemoryError("out of GPU memory a"), GpuMemoryError("out of GPU memory b")]
    with pytest.raises(GpuMemoryError, match="memory b"):
        job.capture_beside(starts, spec, options, "cuda:0", say)
    # not set up, no starts, or another error: no second capture, and a process set up
    # is kept for another error
    for starts, error in ((Starts(set_up=False), GpuMemoryError("out of GPU memory")),
                          (None, GpuMemoryError("out of GPU memory")),
                          (Starts(), ResourceError("the GPU failed while capturing x")),
                          (Starts(), UserError("x: the model failed on its input"))):
        failures[:], calls[:] = [error], []
        with pytest.raises(type(error)):
            job.capture_beside(starts, spec, options, "cuda:0", say)
        assert calls == ["cuda:0"]
        if starts is not None and not isinstance(error, GpuMemoryError):
            assert starts.let == 0 and starts.set_up


def test_verbose_says_where_the_time_before_the_sweep_went(tmp_path, monkeypatch, capsys):
    """--verbose ends with the seconds before the sweep's first step, since the process
    started: the interpreter and imports, torch, the model built and captured (the
    capture itself apart), and the rest until the first step; none without /proc."""
    import cudnn_explorer.jobs.sweep as job
    from cudnn_explorer.cli import model as cli

    ages = iter([0.9, 4.1, 9.4, 10.6])
    monkeypatch.setattr(cli, "process_age_s", lambda: next(ages))
    def capture(spec, device, notify, progress=None):
        progress(f"capturing on {device}")
        return dataclasses.replace(small_capture(), seconds=1.0)

    monkeypatch.setattr(job, "capture", capture)
    fake_bench(job, tmp_path, monkeypatch)
    assert cli.run(["resnet18", "--batch", "2", "--no-store", "--verbose"]) == 0
    err = capsys.readouterr().err
    # the capture's step as a timed line before the bar (long work shows progress)
    lines = [x for x in err.splitlines() if x.startswith("cudnn_explorer: [")]
    assert lines[0].endswith("s] capturing on cuda:0"), lines
    assert ("before the sweep's first step: 10.6 s since the process started: the "
            "interpreter, the tool's imports and the arguments 0.9, torch and the extension "
            "imported 3.2, the model built and captured 5.3 (the capture itself 1.0), until "
            "the sweep's first step 1.2 s") in " ".join(err.split())
    monkeypatch.setattr(cli, "process_age_s", lambda: None)
    assert cli.run(["resnet18", "--batch", "2", "--no-store", "--verbose"]) == 0
    assert "before the sweep" not in capsys.readouterr().err


def test_the_capture_job_says_its_step_once_the_model_is_checked():
    """jobs.sweep.capture tells ``progress`` what it builds and where, after the checks (a
    misspelt name or a missing GPU is the one line, with nothing before it)."""
    from cudnn_explorer.jobs.sweep import capture as capture_job

    said = []
    cap = capture_job("resnet18", "cpu", lambda kind, text: None, progress=said.append,
                      batch=2, input_shape=[3, 32, 32])
    assert cap.problems and said == [
        "building the model and capturing one iteration on cpu: resnet18, input 2x3x32x32, "
        "training step (forward + backward), no AMP, contiguous"]
    with pytest.raises(UserError):
        capture_job("resnet_nope", "cuda:0", progress=said.append)
    assert len(said) == 1
