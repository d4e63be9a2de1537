"""Zero-code adoption on the GPU: a script recorded, given plans for every recorded
problem-direction (cuDNN's first heuristic config that builds: tune's stand-in here), and
run pinned, with every convolution call pinned: eager, compiled, and a bare F.conv2d."""
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import requires_cuda
from tests.test_zero_code import ROOT, hooked  # noqa: F401  (the fixture)

pytestmark = requires_cuda

SCRIPT = """
import sys, torch, torch.nn as nn, torch.nn.functional as F
compiled = sys.argv[1] == "compiled"
model = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, stride=2),
                      nn.ReLU(), nn.Conv1d(16, 8, 1) if False else nn.Identity()).cuda()
step_model = torch.compile(model) if compiled else model
opt = torch.optim.SGD(model.parameters(), lr=0.01)
w = torch.randn(4, 3, 5, 5, device="cuda")
for i in range(4):
    x = torch.randn(2, 3, 16, 16, device="cuda")
    with torch.autocast("cuda", torch.bfloat16, enabled=i % 2 == 1):  # every other step
        loss = step_model(x).square().mean() + F.conv2d(x, w, padding=2).float().mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
torch.cuda.synchronize()
print("done", flush=True)
"""


def _cli(*args, env):
    return subprocess.run([sys.executable, "-m", "cudnn_explorer", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _plans_for(record, path):
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from cudnn_explorer.measure.pipeline import environment
    from tests.pinning_helpers import entry, heuristic_configs

    entries = []
    for c in record.convs:
        configs = heuristic_configs(c.problem, c.direction, 1)
        assert configs, f"no heuristic config builds for {c.description}"
        entries.append(entry(c.problem, c.direction, *configs[0]))
    path.write_text(PlanFile(environment=PlanEnvironment.of(environment(0)),
                             entries=entries).to_json())


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_record_then_run_pins_every_call(hooked, tmp_path, mode):  # noqa: F811
    from cudnn_explorer.core.zero_code import RunReport, read_convs

    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    convs = tmp_path / "convs.json"
    r = _cli("record", "-o", str(convs), "--", sys.executable, str(script), mode, env=hooked)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    record = read_convs(str(convs))
    directions = {(c.direction, c.problem.input_shape) for c in record.convs}
    # the model's two layers (fwd, bwd-data where the input needs it, bwd-filter) and the
    # bare F.conv2d (fwd only: w needs no gradient)
    assert ("fwd", (2, 3, 16, 16)) in directions and ("bwd-filter", (2, 16, 16, 16)) in \
        directions and not record.unkeyed, record
    assert all(c.problem is not None for c in record.convs)
    # layer names, per key: the Sequential's two convolutions, eager or compiled (named
    # while traced: Note [names of traced calls]), float32 and autocast's bfloat16 alike;
    # the bare F.conv2d's weight belongs to no module
    for c in record.convs:
        want = {3: ["0"], 16: ["2"]}.get(c.problem.input_shape[1]) \
            if c.problem.out_channels == 16 else []
        assert c.layers == want, (c.description, c.layers)
    assert {c.problem.dtype for c in record.convs} == {"float32", "bfloat16"}, record
    plans = tmp_path / "plans.json"
    _plans_for(record, plans)
    report = tmp_path / "report.json"
    r = _cli("run", "--plans", str(plans), "--strict", "--report", str(report), "--",
             sys.executable, str(script), mode, env=hooked)
    assert r.returncode == 0 and "done" in r.stdout, r.stderr
    counts = RunReport.read(report.read_text()).counts
    assert counts.fallback_calls == 0 and counts.pinned_calls >= record.calls // 2, counts
    line = [ln for ln in r.stderr.splitlines() if "convolution calls ran" in ln]
    assert line == [f"cudnn_explorer: {counts.pinned_calls:,} of {counts.calls:,} convolution "
                    f"calls ran pinned plans"]
    assert not os.path.exists(str(plans) + ".misses")
    # the bare variable, a plan file missing one problem-direction: its misses appended
    d = json.loads(plans.read_text())
    d["entries"] = d["entries"][1:]
    plans.write_text(json.dumps(d))
    env = dict(hooked, CUDNN_EXPLORER_PLANS=str(plans),
               CUDNN_EXPLORER_MISSES=str(tmp_path / "misses"))
    r = subprocess.run([sys.executable, str(script), mode], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "fell back (1 problem-direction not in the file)" in r.stderr.splitlines()[-1]
    missed = read_convs(str(tmp_path / "misses"))
    assert [c.key for c in missed.convs] == [record.convs[0].key]
