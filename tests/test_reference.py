"""The shipped reference results (H200, H100) load and render without a GPU."""
import glob
import os

import pytest

from conftest import REPO
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.report.tables import render_exploration

FILES = sorted(glob.glob(os.path.join(REPO, "data", "reference", "*.json")))
SWEEPS = sorted(glob.glob(os.path.join(REPO, "data", "reference", "*.json.gz")))


def test_there_is_reference_data():
    assert len(FILES) >= 4


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_reference_result_loads_and_renders(path):
    with open(path, "rb") as f:
        exp = Exploration.from_json(f.read())
    # the GPU the file's name says: h200-... an H200, h100-... an H100
    gpu = os.path.basename(path).split("-")[0].upper()
    assert exp.environment.gpu_name.startswith(f"NVIDIA {gpu}") and exp.environment.cudnn_runtime
    text = render_exploration(exp)
    assert all(len(line) <= 120 for line in text.splitlines())
    for d in exp.directions:  # every direction has a measured best row
        assert d.best() is not None and d.best().timing is not None


def test_csv_holds_legacy_rows_engine_configs_and_pytorchs_picks():
    import csv
    import io

    from cudnn_explorer.report.export import rows_from_csv, rows_to_csv

    path = os.path.join(REPO, "data", "reference", "h200-default-fp32.json")
    with open(path, "rb") as f:
        exp = Exploration.from_json(f.read())
    text = rows_to_csv(exp)
    rows = list(csv.DictReader(io.StringIO(text)))
    for d in exp.directions:
        mine = [r for r in rows if r["direction"] == d.direction]
        assert sum(r["kind"] == "legacy" for r in mine) == len(d.find)
        assert sum(r["kind"] == "engine" for r in mine) == len(d.engines.configs)
        picks = [r for r in mine if r["kind"] == "pytorch"]
        assert [r["mode"] for r in picks] == [p.label for p in d.pytorch]
        bench = d.pytorch_pick("benchmark")
        row = next(r for r in picks if r["mode"] == bench.label)
        assert row["algo_name"] == bench.engine_tag
        assert float(row["median_ms"]) == bench.steady.median_ms
        best = next(r for r in mine if r["kind"] == "engine" and r["best"] == "yes")
        assert best["algo_name"] == d.engines.best(allowed_only=True).tag
        assert all(r["gpu_name"] == "NVIDIA H200" for r in mine)
    assert len(rows_from_csv(text)) == sum(len(d.find) for d in exp.directions)


@pytest.mark.parametrize("path", SWEEPS, ids=os.path.basename)
def test_reference_model_sweep_loads_and_renders(path):
    from cudnn_explorer.core.files import read_bytes
    from cudnn_explorer.core.model_sweep import ModelSweep
    from cudnn_explorer.report.model import render_sweep

    sw = ModelSweep.from_json(read_bytes(path, "--load"))
    # the GPU the file's name says: h200-... an H200, h100-... an H100
    gpu = os.path.basename(path).split("-")[0].upper()
    assert sw.environment.gpu_name.startswith(f"NVIDIA {gpu}") and sw.complete
    assert len(sw.entries) == len(sw.capture.problems) and all(e.exploration for e in sw.entries)
    text = render_sweep(sw)
    assert "model totals" in text and "PyTorch's own run of the model" in text
    assert all(len(line) <= 120 for line in text.splitlines())


def test_there_is_a_reference_model_sweep():
    assert SWEEPS
