"""Deviceless heuristics with the real cuDNN of the torch wheel and no GPU: device profiles,
the ranking per target, PyTorch's filters, and a crashing query that the process survives."""
import json

import os

import pytest

from conftest import requires_ext, run_cli
from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.targets import (TargetPlan, TargetRanking, cudnn_strides,
                                         load_profile, resolve_targets, shipped_profiles)

DEFAULT = ConvProblem.create("32,3,224,224", kernel=3)


def test_shipped_profiles_load_and_say_what_they_are():
    index = shipped_profiles()
    assert {"h200", "a100", "h100", "l4", "v100", "rtx4090", "b200"} <= set(index)
    for key, entry in index.items():
        p = load_profile(key)
        assert p.device_name == entry["gpu"] and p.compute_capability == entry["compute_capability"]
        assert p.synthesized == (key != "h200") and entry["source"]
    assert load_profile("h200").sm_count == 132 and load_profile("v100").compute_capability == "7.0"


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.pop("deviceVer"), "deviceVer: missing"),
    (lambda d: d.update(multiProcessorCount="many"), "multiProcessorCount: \"many\""),
    (lambda d: d.update(maxGridSize=[1, 2]), "maxGridSize"),
    (lambda d: d.update(smClockRateKHz=0), "smClockRateKHz: must be > 0"),
    # what cuDNN's own parser crashes or fails on (a child process dying, once exit 3)
    (lambda d: d.update(deviceName="X" * 260), "deviceName: 260 bytes; expected at most 255"),
    (lambda d: d.update(l2CacheSize=2**31), "l2CacheSize: 2147483648; expected an integer below"),
    (lambda d: d.update(deviceVer=120), "deviceVer: 120; expected the compute capability x 100"),
])
def test_malformed_profile_names_the_field(tmp_path, edit, match):
    d = json.loads(load_profile("h200").text)
    edit(d)
    f = tmp_path / "gpu.json"
    f.write_text(json.dumps(d))
    with pytest.raises(UserError, match=match):
        resolve_targets(str(f))
    f.write_bytes(b"\xff\xfe")
    with pytest.raises(UserError, match="not a text file"):
        load_profile(str(f))
    with pytest.raises(UserError, match="unknown; valid: a100"):
        resolve_targets("h200,gtx480")
    with pytest.raises(UserError, match="listed twice"):
        resolve_targets("h200,H200")


def test_strides_are_what_torch_gives():
    torch = pytest.importorskip("torch")
    for shape in [(2, 3, 5, 7), (2, 3, 4, 5, 6), (1, 1, 1, 1)]:
        fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
        assert cudnn_strides(shape, "nhwc") == torch.empty(shape, memory_format=fmt).stride()
        assert cudnn_strides(shape, "nchw") == torch.empty(shape).stride()


def test_pytorch_filters_and_order():
    r = TargetRanking(target="x", device_name="X", compute_capability="9.0", sm_count=1,
                      direction="fwd",
                      a=[TargetPlan("eng1", ["DOWN_CONVERT_INPUTS"]),
                         TargetPlan("eng2", ["TENSOR_CORE"]), TargetPlan("eng3")],
                      fallback=[TargetPlan("eng3"), TargetPlan("eng0", ["NONDETERMINISTIC"])])
    assert [p.name for p in r.candidates()] == ["eng1", "eng2", "eng3", "eng0"]
    assert r.heuristic_pick("float32", True).name == "eng2"
    assert r.heuristic_pick("float32", False).name == "eng3"  # TF32 off: no tensor cores
    assert [p.name for p in r.allowed("float16", None, deterministic=True)] == ["eng2", "eng3"]
    assert [p.name for p in r.benchmark_candidates("float16", None, limit=2)] == ["eng2", "eng3"]


@requires_ext
def test_h200_profile_ranks_pytorchs_heuristic_pick_first():
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.deviceless import rank_targets

    (r,) = rank_targets(DEFAULT, ["fwd"], [load_profile("h200")])
    cudnn = native.runtime_info().get("cudnn")
    assert r.ok, r.status
    top = r.a[0].name
    # On the H200 (cuDNN 9.19) PyTorch ran eng70_k2=4_k18=0 with benchmark off, and the
    # H200's profile ranks it first with cuDNN 9.19 and 9.24. A newer cuDNN may rank
    # differently: then this says so plainly.
    assert top == "eng70_k2=4_k18=0", f"cuDNN {cudnn} now ranks {top} first for the H200"
    assert r.heuristic_pick(DEFAULT.dtype, DEFAULT.tf32).name == top


@requires_ext
def test_architectures_rank_differently_and_a_crash_is_reported(monkeypatch):
    from cudnn_explorer.measure.deviceless import rank_targets

    monkeypatch.setenv("CUDNN_EXPLORER_TEST_CRASH_TARGET", "b200")
    p = ConvProblem.create("32,64,56,56", out_channels=64, dtype="float16", layout="nhwc")
    got = rank_targets(p, ["fwd"], resolve_targets("h200,v100,b200,a100"))
    by = {r.target: r for r in got}
    assert by["b200"].status == "failed: the query process killed by SIGSEGV"
    assert all(by[t].ok and by[t].a for t in ("h200", "v100", "a100"))
    tops = {t: by[t].a[0].name.split("_")[0] for t in ("h200", "v100", "a100")}
    assert len(set(tops.values())) == 3, tops  # three architectures, three engines


@requires_ext
def test_cli_target_needs_no_gpu(tmp_path):
    r = run_cli("--shape", "8,64,28,28", "--out-channels", "64", "--dtype", "float16",
                "--layout", "nhwc", "--direction", "fwd", "--target", "h200,v100",
                "--json", str(tmp_path / "t.json"), env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    assert "HEURISTIC, NOT MEASURED" in r.stdout and "v100*" in r.stdout
    assert all(len(line) <= 120 for line in r.stdout.splitlines())
    doc = json.loads((tmp_path / "t.json").read_text())
    assert doc["kind"] == "heuristic, not measured" and len(doc["rankings"]) == 2
    r = run_cli("--target", "list")
    assert r.returncode == 0 and "synthesized" in r.stdout and "dumped" in r.stdout
    r = run_cli("--shape", "8,64,28,28", "--target", "h200", "--budget-ms", "5")
    assert r.returncode == 2 and "--budget-ms would be ignored" in r.stderr


@requires_ext
def test_model_targets_matrix_and_plot(tmp_path):
    pytest.importorskip("torch")
    (tmp_path / "twonets.py").write_text(
        "import torch\n"
        "def net():\n"
        "    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1),\n"
        "                               torch.nn.Conv2d(16, 16, 3, stride=2, padding=1))\n")
    png, out = tmp_path / "m.png", tmp_path / "m.json"
    r = run_cli("model", "--model", "twonets:net", "--batch", "2", "--input", "3x16x16",
                "--amp", "fp16", "--target", "h200,v100", "--plot", str(png), "--json",
                str(out), env={"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")})
    assert r.returncode == 0, r.stderr
    assert "HEURISTIC, NOT MEASURED" in r.stdout and "#2 bwd-data" in r.stdout
    assert "#1 bwd-data" not in r.stdout  # the first layer has none
    assert "of 5 problem-directions" in r.stdout
    assert png.read_bytes()[:4] == b"\x89PNG"
    doc = json.loads(out.read_text())
    assert doc["kind"] == "heuristic, not measured" and len(doc["rankings"]) == 2
    r = run_cli("model", "resnet18", "--target", "h200", "--budget-ms", "5")
    assert r.returncode == 2 and "--budget-ms would be ignored" in r.stderr
    r = run_cli("model", "resnet18", "--plot", str(png))
    assert r.returncode == 2 and "--plot needs --target" in r.stderr


@requires_ext
def test_measured_time_beside_a_target_pick_from_the_store(tmp_path):
    """The H200 reference results in a store: the h200 target's forward pick shows its
    measured median; the A100's shows none (nothing measured there)."""
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.store.db import Store

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "data", "reference", "h200-default-fp32.json")) as f:
        exp = Exploration.from_json(f.read())
    opts = ExploreOptions.from_dict(exp.measurement.options)
    db = str(tmp_path / "r.db")
    with Store(db) as store:
        for d in exp.directions:
            store.save(exp.problem, exp.environment, opts, exp.measurement, d)
    r = run_cli("--shape", "32,3,224,224", "--kernel", "3", "--direction", "fwd",
                "--target", "h200,a100", "--store", db, env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0, r.stderr
    fwd = exp.direction("fwd")
    t = fwd.engines.config("ConvFwd_eng70_k2=4_k18=0").time
    (h200,) = [ln for ln in r.stdout.splitlines() if ln.startswith("h200 ")]
    (a100,) = [ln for ln in r.stdout.splitlines() if ln.startswith("a100")]
    assert f"({t:.4f} ms)" in h200 and " ms)" not in a100
    assert "MEASURED beside a pick" in r.stdout and "NVIDIA H200" in r.stdout
    # no store file: nothing measured, and none is created
    r = run_cli("--shape", "32,3,224,224", "--kernel", "3", "--direction", "fwd",
                "--target", "h200", "--store", str(tmp_path / "none.db"),
                env={"CUDA_VISIBLE_DEVICES": ""})
    assert r.returncode == 0 and " ms)" not in r.stdout
    assert not (tmp_path / "none.db").exists()
