"""The shipped H200 reference results load and render without a GPU."""
import glob
import os

import pytest

from conftest import REPO
from cudnn_explorer.core.records import Exploration
from cudnn_explorer.report.tables import render_exploration

FILES = sorted(glob.glob(os.path.join(REPO, "data", "reference", "*.json")))


def test_there_is_reference_data():
    assert len(FILES) >= 4


@pytest.mark.parametrize("path", FILES, ids=os.path.basename)
def test_reference_result_loads_and_renders(path):
    with open(path, "rb") as f:
        exp = Exploration.from_json(f.read())
    assert exp.environment.gpu_name == "NVIDIA H200" and exp.environment.cudnn_runtime
    text = render_exploration(exp)
    assert all(len(line) <= 120 for line in text.splitlines())
    for d in exp.directions:  # every direction has a measured best row
        assert d.best() is not None and d.best().timing is not None
