"""The processes of PyTorch's run of a model (model/mode_runner.py), on the CPU with a
stand-in interpreter: every mode's processes started before the first one runs, those
started before the capture (ModeStarts) taken by position and the rest ended, and what a
process imports ahead of its turn."""
import json
import os

import pytest

pytest.importorskip("torch")

from cudnn_explorer.core.child_records import ModelChildResult, SizeResult  # noqa: E402
from cudnn_explorer.core.capture import Capture, ModelSpec, UniqueConv  # noqa: E402
from cudnn_explorer.core.options import ExploreOptions  # noqa: E402
from cudnn_explorer.core.problem import ConvProblem  # noqa: E402
from cudnn_explorer.model import mode_runner, run_modes  # noqa: E402


def _ready_child(tmp_path, result: ModelChildResult):
    """A stand-in interpreter for the model processes: it says it is ready at once, waits
    for its go, then writes ``result`` (the prestart protocol, without torch)."""
    (tmp_path / "result.json").write_text(json.dumps(result.to_dict()))
    (tmp_path / "child.py").write_text(
        "import shutil, sys\n"
        "print('cudnn_explorer: ready', flush=True)\n"
        "if sys.stdin.readline():\n"
        f"    shutil.copy({str(tmp_path / 'result.json')!r}, sys.argv[-1])\n")
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {os.sys.executable} {tmp_path / 'child.py'} \"$@\"\n")
    fake.chmod(0o755)
    return str(fake)


def _tiny_run(tmp_path):
    """(a stand-in interpreter whose every run gives one size, a one-problem capture, the
    options) for run_model."""
    result = ModelChildResult(sizes=[SizeResult(input_shape=[3, 8, 8], first_ms=1.0,
                                                steady_ms=[1.0, 1.0])])
    problem = ConvProblem.create("2,3,8,8", out_channels=8, kernel=3, padding=1)
    cap = Capture(model=ModelSpec(name="tiny", input_shape=[3, 8, 8], batch=2),
                  problems=[UniqueConv(problem, {"fwd": 1}, ["0"])], conv_calls=1)
    return _ready_child(tmp_path, result), cap, ExploreOptions.create(child_timeout_s=60)


def _recorded(monkeypatch):
    """The list every StartedChild made from now on is appended to."""
    from cudnn_explorer.measure.prestart import StartedChild

    started, real_init = [], StartedChild.__init__

    def init(self, *args, **kw):
        real_init(self, *args, **kw)
        started.append(self)

    monkeypatch.setattr(StartedChild, "__init__", init)
    return started


def test_every_modes_processes_start_before_the_first_one_runs(tmp_path, monkeypatch):
    """Note [model children started ahead]: each mode's process and its steady process
    are started at once, each given its spec in its turn; every one has ended when the
    run returns, and when it is interrupted."""
    python, cap, opts = _tiny_run(tmp_path)
    modes = run_modes.model_modes()[:3]
    from cudnn_explorer.measure.prestart import StartedChild

    started, at_run = _recorded(monkeypatch), []
    real_run = StartedChild.go

    def run(self, spec, *args):
        at_run.append((len(started), bool(spec.get("steady_only"))))
        return real_run(self, spec, *args)

    monkeypatch.setattr(StartedChild, "go", run)
    got, _ = run_modes.run_model(cap, opts,
                                 run_modes.ModeTiming(iterations=1,
                                                      warmup=0, python=python, graph=True),
                                 modes=modes)
    # three modes, each a first and a steady process: all six running before the first go
    assert at_run == [(6, False), (6, True)] * 3
    assert [m.sizes[0].first_ms for m in got.modes] == [1.0] * 3
    assert all("wrote no cudnn-frontend log" in m.error for m in got.modes)
    assert all(s.proc.poll() is not None for s in started)
    # interrupted in the first mode's run: the processes whose turn never came are ended
    started.clear()

    def interrupted(self, spec, *args):
        raise KeyboardInterrupt

    monkeypatch.setattr(StartedChild, "go", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_modes.run_model(cap, opts, run_modes.ModeTiming(iterations=1, python=python),
                            modes=modes)
    assert len(started) == 3 and all(s.proc.poll() is not None for s in started)
    assert all(not os.path.exists(s.spec_path) for s in started)  # their files removed


def test_run_model_runs_the_processes_started_before_and_starts_no_other(tmp_path,
                                                                        monkeypatch):
    """ModeStarts, what the model jobs start before the capture: run_model takes each
    mode's processes from it by position and starts none; the pinned mode's first process
    has no log; one never taken (a mode answered from the store) and one started for
    another ``graph`` setting are ended by close, and a mode not started is started."""
    python, cap, opts = _tiny_run(tmp_path)
    modes = run_modes.model_modes()[:2]
    started = _recorded(monkeypatch)
    with mode_runner.ModeStarts(cap.model, [False, False, True], python=python,
                                 graph=True) as starts:
        assert len(started) == 6
        assert [s.log_path is None for s in started] == [False, True, False, True, True, True]
        got, _ = run_modes.run_model(cap, opts,
                                     run_modes.ModeTiming(iterations=1,
                                                          warmup=0, python=python, graph=True),
                                     modes=modes, started=starts)
        assert len(started) == 6  # run_model started none of its own
        assert [m.sizes[0].first_ms for m in got.modes] == [1.0, 1.0]
        assert [s.proc.poll() is not None for s in started] == [True] * 4 + [False] * 2
    assert all(s.proc.poll() is not None for s in started)  # the third mode's, never taken
    started.clear()
    with mode_runner.ModeStarts(cap.model, [False], python=python, graph=False) as starts:
        run_modes.run_model(cap, opts,
                            run_modes.ModeTiming(iterations=1, warmup=0, python=python, graph=True),
                            modes=modes, started=starts)
        # started for no CUDA graph: not taken; both modes started their own two
        assert len(started) == 5 and started[0].proc.poll() is None
    assert all(s.proc.poll() is not None for s in started)


@pytest.mark.parametrize("name,factory,extra", [("resnet18", "", "torchvision"),
                                                ("timm:resnet18", "", "timm"),
                                                ("", "mine:build", None)])
def test_a_model_process_imports_ahead_what_its_child_needs_and_runs_it_once(name, factory,
                                                                           extra):
    """The preload names torch, the model's library (never the user's module) and what
    the child imports, not the child itself: runpy then runs its one copy, without
    warning that the module was imported before."""
    import subprocess
    import sys

    spec = ModelSpec(name=name, factory=factory, input_shape=[3, 8, 8], batch=1)
    preload = mode_runner.preload(spec).split(",")
    assert "torch" in preload and mode_runner.MODEL_CHILD not in preload
    # Note [imports outside the first iteration] in model/tracer.py
    assert {"torch._dynamo", "cudnn_explorer.measure.tensors"} <= set(preload)
    assert (extra in preload) if extra else not {"torchvision", "timm", "mine"} & set(preload)
    out = subprocess.run([sys.executable, "-m", "cudnn_explorer.measure.prestart", "--preload",
                          ",".join(n for n in preload if n not in ("torchvision", "timm")),
                          mode_runner.MODEL_CHILD], input="go\n", capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.startswith("cudnn_explorer: ready")
    assert "usage: python -m cudnn_explorer.model.mode_child" in out.stderr, out.stderr
    assert "RuntimeWarning" not in out.stderr, out.stderr


_FIRST_ITERATION_SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
import torch
from cudnn_explorer.core.capture import ModelSpec
from cudnn_explorer.model import mode_child
new = []
real = mode_child.first_iteration
def watched(*args, **kwargs):
    before = set(sys.modules)
    try:
        return real(*args, **kwargs)
    finally:
        new.extend(sorted(set(sys.modules) - before))
mode_child.first_iteration = watched
before = "torch._dynamo" in sys.modules
spec = ModelSpec(factory="plainnets:plain", input_shape=[3, 8, 8], batch=2)
out = mode_child.run({"device": -1, "mode": sys.argv[2], "model": spec.to_dict(),
                       "shapes": [[3, 8, 8]], "iterations": 2, "warmup": 1}, lambda r: None)
print(json.dumps({"before": before, "after": "torch._dynamo" in sys.modules,
                  "imported_in_first_iteration": new, "sizes": len(out["sizes"]),
                  "error": out["error"]}))
"""


@pytest.mark.parametrize("mode", ["heuristics", "benchmark"])
def test_the_first_iteration_imports_nothing(tmp_path, mode):
    """Note [imports outside the first iteration] in model/tracer.py: the child times
    PyTorch's first iteration with its probe in it, so no module is imported for the first
    time there; torch._dynamo (which the probe's TorchDispatchMode wrapper imports on its
    first call) included, for a model whose library never imports it (here a factory of
    plain layers), in a fresh process that did not import it ahead."""
    import subprocess
    import sys

    (tmp_path / "plainnets.py").write_text(
        "import torch\n"
        "def plain():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),\n"
        "                               torch.nn.Conv2d(8, 8, 3, padding=1))\n")
    out = subprocess.run([sys.executable, "-c", _FIRST_ITERATION_SCRIPT, str(tmp_path), mode],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] is False and got["after"] is True
    assert got["sizes"] == 1 and got["error"] == ""
    assert got["imported_in_first_iteration"] == []


def test_a_preload_that_fails_to_import_is_a_head_start_lost_not_a_dead_process(tmp_path):
    """A preloaded module that raises (not only ImportError) leaves the process ready:
    the child imports it again and reports it there."""
    import subprocess
    import sys

    (tmp_path / "broken_at_import.py").write_text("raise RuntimeError('broken on purpose')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-m", "cudnn_explorer.measure.prestart", "--preload",
                          "broken_at_import,json", "json.tool", "--help"], input="go\n",
                         capture_output=True, text=True, timeout=120, env=env)
    assert out.stdout.startswith("cudnn_explorer: ready"), (out.stdout, out.stderr)
    assert "usage:" in out.stdout + out.stderr


def test_a_child_set_up_ahead_is_held_when_its_marks_came_back_to_back(tmp_path):
    """A process set up ahead says READY and, its setup done, HELD; when both are in the
    pipe before the parent looks (its capture took longer than the child's setup), the
    wait for HELD sees it at once (a buffered readline took both lines and then waited on
    the pipe for one more, the whole time limit: the GPU sweep hung there)."""
    import time

    from cudnn_explorer.measure.prestart import StartedChild

    (tmp_path / "result.json").write_text(json.dumps(ModelChildResult().to_dict()))
    (tmp_path / "child.py").write_text(
        "import shutil, sys\n"
        "print('cudnn_explorer: ready', flush=True)\n"
        "if sys.stdin.readline():\n"
        "    print('cudnn_explorer: held', flush=True)\n"
        "    if sys.stdin.readline():\n"
        f"        shutil.copy({str(tmp_path / 'result.json')!r}, sys.argv[-1])\n")
    fake = tmp_path / "python"
    fake.write_text(f"#!/bin/sh\nexec {os.sys.executable} {tmp_path / 'child.py'} \"$@\"\n")
    fake.chmod(0o755)
    child = StartedChild("cudnn_explorer.model.mode_child", python=str(fake))
    try:
        child.prepare({"mode": "benchmark"})
        assert json.loads(open(child.spec_path).read()) == {"mode": "benchmark", "hold": True}
        time.sleep(1.0)  # both marks in the pipe before the parent looks
        t0 = time.perf_counter()
        assert child.wait_held(30)
        assert time.perf_counter() - t0 < 5
        rc, _, waited, _ = child.go({"mode": "benchmark", "shapes": [[3, 8, 8]]}, 30)
        assert rc == 0 and waited < 5 and os.path.exists(child.result_path)
        assert json.loads(open(child.spec_path).read())["shapes"] == [[3, 8, 8]]
    finally:
        child.close()
    # one that exits before it is held: not held, at once
    (tmp_path / "child.py").write_text("print('cudnn_explorer: ready', flush=True)\n")
    child = StartedChild("cudnn_explorer.model.mode_child", python=str(fake))
    try:
        child.prepare({})
        assert not child.wait_held(30)
    finally:
        child.close()


def test_a_process_set_up_ahead_is_let_go_and_replaced(tmp_path, monkeypatch):
    """Note [capture before the setup]: ModeStarts.let_go ends the first mode's process
    that was set up ahead (its GPU memory given back) and starts a fresh one in its place,
    not set up, with the same log setting; a position not set up, or not started, is left
    as it is."""
    python, cap, _ = _tiny_run(tmp_path)
    started = _recorded(monkeypatch)
    with mode_runner.ModeStarts(cap.model, [False, True], python=python) as starts:
        assert not starts.let_go(0) and not starts.let_go(7)  # none set up
        assert len(started) == 2
        assert starts.prepare(1, {"mode": "pinned"})
        old = started[1]
        assert starts.let_go(1)
        assert old.proc.poll() is not None  # ended
        assert len(started) == 3
        fresh, second = starts.take(1, graph=False)
        assert fresh is started[2] and fresh.proc.poll() is None and second is None
        assert fresh.prepared is None and fresh.log_path is None  # the pinned mode: no log
        assert not starts.let_go(1)  # taken
        fresh.close()
    assert all(s.proc.poll() is not None for s in started)
