"""GPU: a small model end to end: capture on the GPU, sweep every unique problem, report.
Inference (--eval) keeps it to two forward problems: each problem runs PyTorch's children."""
import os

import pytest

from conftest import run_cli

pytestmark = pytest.mark.gpu

FACTORY = '''
import torch

def tiny():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1),
                               torch.nn.Conv2d(16, 16, 3, padding=1))
'''


def test_small_model_end_to_end(tmp_path):
    (tmp_path / "tinynets.py").write_text(FACTORY)
    out = tmp_path / "sweep.json"
    r = run_cli("model", "--model", "tinynets:tiny", "--batch", "4", "--input", "3x16x16",
                "--amp", "fp16", "--channels-last", "--eval", "--budget-ms", "5", "--engine-configs",
                "1", "--engine-budget-s", "10", "--quiet", "--json", str(out),
                env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "2 unique problems" in r.stdout and "model totals (2 of 2" in r.stdout
    assert "float16 nhwc" in r.stdout
    r = run_cli("model", "--load", str(out))
    assert r.returncode == 0 and "left on the table" in r.stdout, r.stderr


UPSAMPLING = '''
import torch

def updown():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, stride=2, padding=1),
                               torch.nn.ConvTranspose2d(16, 8, 4, stride=2, padding=1))
'''


def test_a_transposed_convolution_is_explored_with_pytorchs_picks(tmp_path):
    """A training step through a transposed convolution: its forward is found as its
    problem's backward-data in PyTorch's run of the model, its input's gradient as the
    forward, its weight's gradient as the backward-filter (Note [transposed]): every
    problem-direction has PyTorch's pick and a time."""
    (tmp_path / "upnets.py").write_text(UPSAMPLING)
    out = tmp_path / "sweep.json"
    r = run_cli("model", "--model", "upnets:updown", "--batch", "4", "--input", "3x32x32",
                "--amp", "fp16", "--channels-last", "--budget-ms", "5", "--engine-configs",
                "1", "--engine-budget-s", "10", "--no-store", "--quiet", "--json", str(out),
                env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")},
                timeout=400)
    assert r.returncode == 0, r.stderr
    assert "2 unique problems" in r.stdout and "1 (transposed)" in r.stdout, r.stdout
    assert "not covered" not in r.stdout
    # conv: fwd and bwd-filter (its input needs no gradient); the transposed one: all three
    assert "model totals (5 of 5 problem-directions" in r.stdout, r.stdout


def test_advise_small_model_two_sizes_with_repeats(tmp_path):
    """advise end to end on the GPU: two input sizes, a graph of the whole training step,
    a repeat of the benchmark-on run, the verdict, and the saved advice rendered again."""
    (tmp_path / "tinynets.py").write_text(FACTORY)
    out = tmp_path / "advice.json"
    r = run_cli("advise", "--model", "tinynets:tiny", "--batch", "4", "--sizes", "16,24",
                "--iterations", "500", "--repeats", "2", "--target-ci", "2", "--no-store",
                "--quiet", "--json", str(out),
                env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")},
                timeout=400)
    assert r.returncode == 0, r.stderr
    assert "== verdict for 500 iterations: " in r.stdout
    assert "replays of a CUDA graph of the whole step" in r.stdout, r.stdout
    assert "== pick stability: 2 fresh processes with benchmark on (0 failed)" in r.stdout
    assert "break-even: " in r.stdout and "expected total: " in r.stdout
    r2 = run_cli("advise", "--load", str(out))
    assert r2.returncode == 0, r2.stderr
    verdict = [x for x in r.stdout.splitlines() if x.startswith("== verdict")]
    assert verdict and verdict[0] in r2.stdout.splitlines()


SYNCING = '''
import torch

class Syncing(torch.nn.Module):
    """A step that cannot be captured (a host sync in forward) and draws random numbers
    (dropout) at every step."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.drop = torch.nn.Dropout(0.5)

    def forward(self, x):
        y = self.drop(self.conv(x))
        if y.sum().item() == float("inf"):
            y = y * 0
        return y

def syncing():
    return Syncing()
'''


def test_advise_goes_on_after_a_failed_capture(tmp_path):
    """A step the graph cannot hold is timed eagerly, with the reason, and the next size
    still runs: the failed capture leaves the process's random numbers usable."""
    (tmp_path / "syncnets.py").write_text(SYNCING)
    r = run_cli("advise", "--model", "syncnets:syncing", "--batch", "4", "--sizes", "16,24",
                "--iterations", "100", "--target-ci", "5", "--no-store", "--quiet",
                env={"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")},
                timeout=300)
    assert r.returncode == 0, r.stderr + r.stdout[-3000:]
    assert "CUDA graph capture failed" in r.stdout and "no result" not in r.stdout
    # each size captured once more in a fresh process (Note [failed capture]), then timed
    # eagerly by it: no size falls back to the first process's round
    assert "from the first process instead" not in r.stdout, r.stdout[-3000:]
    assert "and again in a fresh process that began at this size" in r.stdout, r.stdout
    assert "== verdict for 100 iterations: " in r.stdout


def test_a_sweeps_plans_pin_model_and_advise_and_an_uncovered_size_is_counted(tmp_path):
    """The workflow on the GPU: a sweep at two input sizes, its plan file, then model and
    advise with --plans. Every call at a covered size runs the file's plans; at a size the
    file does not cover (32), advise counts the calls that ran PyTorch's own."""
    import json
    import re

    (tmp_path / "tinynets.py").write_text(FACTORY)
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    sweep, plans, store = tmp_path / "sweep.json", tmp_path / "p.plans.json", tmp_path / "s.db"
    spec = ["--model", "tinynets:tiny", "--batch", "4", "--sizes", "16,24"]
    quick = ["--budget-ms", "5", "--engine-configs", "1", "--engine-budget-s", "10",
             "--store", str(store), "--quiet"]
    r = run_cli("model", *spec, *quick, "--json", str(sweep), env=env, timeout=400)
    assert r.returncode == 0, r.stderr
    r = run_cli("plans", "write", str(sweep), "-o", str(plans))
    assert r.returncode == 0, r.stderr
    doc = json.loads(plans.read_text())
    # per size: conv1's fwd and bwd-filter (its input needs no gradient), and conv2's and
    # conv3's one problem in all three directions
    assert len(doc["entries"]) == 10 and doc["skipped"] == [], doc["skipped"]
    r = run_cli("model", *spec, *quick, "--plans", str(plans), env=env, timeout=400)
    assert r.returncode == 0, r.stderr
    flat = " ".join(r.stdout.split())  # the report wraps its lines at 120 columns
    got = re.search(r"(\d+) of (\d+) convolution calls of the first iteration ran the plan "
                    r"file's plans, 0 PyTorch's own", flat)
    assert got and got[1] == got[2], r.stdout[-3000:]
    r = run_cli("advise", "--model", "tinynets:tiny", "--batch", "4", "--sizes", "16,24,32",
                "--plans", str(plans), "--iterations", "500", "--target-ci", "5",
                "--no-store", "--quiet", env=env, timeout=500)
    assert r.returncode == 0, r.stderr + r.stdout[-3000:]
    assert "== verdict for 500 iterations: " in r.stdout
    flat = " ".join(r.stdout.split())
    assert "pinned to the plan file, per input size" in flat, r.stdout
    uncovered = re.search(r"pinned, size 32: (\d+) of (\d+) convolution calls of the first "
                          r"iteration not pinned", flat)
    assert uncovered and uncovered[1] == uncovered[2], r.stdout[-3000:]
    assert "pinned, size 16" not in flat and "pinned, size 24" not in flat


OOM_ONCE = '''
import os, sys
import torch

class OutOfMemoryOnce(torch.nn.Module):
    """Runs out of memory in its first forward in the model command's own process (the
    capture), nowhere else: not in PyTorch's mode processes, nor the second capture."""
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 16, 3, padding=1)

    def forward(self, x):
        marker = os.environ["CE_TEST_OOM_MARKER"]
        if sys.argv[0].endswith("__main__.py") and not os.path.exists(marker):
            open(marker, "w").close()
            raise torch.OutOfMemoryError("CUDA out of memory (the test's)")
        return self.conv(x)

def once():
    return OutOfMemoryOnce()
'''


def test_a_capture_out_of_memory_beside_the_setup_ahead_runs_again(tmp_path):
    """Note [capture before the setup] on the GPU: the capture runs out of memory once
    while benchmark mode's process is set up ahead; that process is ended, a fresh one
    runs the mode (its setup in its turn), and the sweep completes."""
    import json

    (tmp_path / "oomnets.py").write_text(OOM_ONCE)
    out = tmp_path / "sweep.json"
    marker = tmp_path / "marker"
    env = {"PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
           "CE_TEST_OOM_MARKER": str(marker)}
    r = run_cli("model", "--model", "oomnets:once", "--batch", "4", "--input", "3x16x16",
                "--eval", "--budget-ms", "5", "--engine-configs", "1", "--engine-budget-s",
                "10", "--no-store", "--json", str(out), env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert marker.exists()
    assert "the capture ran out of GPU memory beside PyTorch's first mode's process" \
        in r.stderr, r.stderr
    sweep = json.loads(out.read_text())
    first = sweep["pytorch_run"]["modes"][0]
    assert first["mode"] == "benchmark" and first["sizes"][0]["first_ms"] > 0
    assert "set up ahead of its turn" not in first["phases_s"], first["phases_s"]
