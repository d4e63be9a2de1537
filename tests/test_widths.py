"""Every output of the shipped data (data/reference/, tests/fixtures/) fits 120 columns:
each saved file rendered by every verb that renders its kind, and every verb's help and
--info, through the command line's own entry point."""
import gzip
import io
import json
import os
from contextlib import redirect_stderr, redirect_stdout

import pytest

from conftest import REPO

WIDTH = 120
DIRS = [os.path.join(REPO, "data", "reference"), os.path.join(REPO, "tests", "fixtures")]
# files of the shipped data that no verb renders: the old search benchmark's rows (a
# staged against a full search, per problem) and a PyTorch child process's raw result
NOT_RENDERED = {None}


def _files():
    for top in DIRS:
        for root, _, names in os.walk(top):
            for name in sorted(names):
                if name.endswith((".json", ".json.gz")):
                    yield os.path.join(root, name)


def _schema(path):
    data = open(path, "rb").read()
    d = json.loads(gzip.decompress(data) if path.endswith(".gz") else data)
    return d.get("schema") if isinstance(d, dict) else None


def _commands(path, tmp):
    schema = _schema(path)
    if schema == "cudnn_explorer.exploration":
        return [["--load", path], ["compare", "--no-store", "--file", path]]
    if schema == "cudnn_explorer.sweep":
        plans = os.path.join(tmp, "p.json")
        return [["model", "--load", path], ["plans", "write", path, "-o", plans],
                ["plans", "show", plans], ["compare", "--no-store", "--file", path]]
    if schema == "cudnn_explorer.advice":
        return [["advise", "--load", path]]
    assert schema in NOT_RENDERED, f"{path}: schema {schema}: which verb renders it?"
    return []


def _run(argv):
    from cudnn_explorer.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _too_wide(text):
    return [line for line in text.splitlines() if len(line) > WIDTH]


@pytest.mark.parametrize("path", list(_files()), ids=lambda p: os.path.relpath(p, REPO))
def test_every_shipped_file_renders_within_120_columns(path, tmp_path):
    for argv in _commands(path, str(tmp_path)):
        code, out, err = _run(argv)
        assert code == 0, (argv, err)
        assert out.strip() and not _too_wide(out), (argv, _too_wide(out)[:3])
        assert not _too_wide(err), (argv, _too_wide(err)[:3])


def test_comparing_all_the_shipped_results_fits_120_columns():
    files = [p for p in _files() if _schema(p) in ("cudnn_explorer.exploration",
                                                   "cudnn_explorer.sweep")]
    argv = ["compare", "--no-store"] + [a for p in files for a in ("--file", p)]
    code, out, err = _run(argv)
    assert code == 0 and out.count("\n") > 20, err
    assert not _too_wide(out), _too_wide(out)[:3]


@pytest.mark.parametrize("argv", [["--help"], ["model", "--help"], ["advise", "--help"],
                                  ["compare", "--help"], ["history", "--help"],
                                  ["export", "--help"], ["plot", "--help"],
                                  ["plans", "--help"]])
def test_every_help_fits_120_columns(argv, monkeypatch):
    from cudnn_explorer.cli.main import run

    # argparse wraps help text to the terminal (COLUMNS), but never a group's title
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        run(argv)
    assert out.getvalue().strip() and not _too_wide(out.getvalue()), \
        _too_wide(out.getvalue())[:3]


def test_info_fits_120_columns_with_torchs_longest_reason():
    from cudnn_explorer.report.tables import render_info

    text = render_info({"built": {"torch": "2.11.0+cu130", "cudnn": "91900"},
                        "running": {"torch": "2.11.0+cu130"}, "gpus": [],
                        "gpu_error": "Found no NVIDIA driver on your system. Please check that "
                                     "you have an NVIDIA GPU and installed a driver from "
                                     "http://www.nvidia.com/Download/index.aspx"})
    assert "GPU: none usable (Found no NVIDIA driver" in text and not _too_wide(text)


def test_history_of_every_shipped_exploration_fits_120_columns(tmp_path):
    """The store's history with the GPUs, versions and problems of the shipped results (an
    H100's name is the longest), written into a store as the commands write them."""
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.core.files import read_text
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.store.db import Store

    path = str(tmp_path / "r.db")
    stored = 0
    with Store(path) as store:
        for f in _files():
            if _schema(f) != "cudnn_explorer.exploration":
                continue
            exp = Exploration.from_json(read_text(f, "a shipped result"))
            for d in exp.directions:
                store.save(exp.problem, exp.environment, ExploreOptions.create(),
                           exp.measurement, d)
                stored += 1
    assert stored > 10
    code, out, err = _run(["history", "--store", path])
    assert code == 0 and out.count("\n") > 5, err
    assert not _too_wide(out), _too_wide(out)[:3]
    assert "H100 80GB HBM3" in out and "NVIDIA H100" not in out
    # a GPU and a torch build with long names
    from dataclasses import replace

    from fakes import retimed_exploration

    exp = retimed_exploration()
    env = replace(exp.environment, gpu_name="NVIDIA RTX PRO 6000 Blackwell Server Edition",
                  torch_version="2.10.0a0+git1234567")
    with Store(path) as store:
        for d in exp.directions:
            store.save(exp.problem, env, ExploreOptions.create(), exp.measurement, d)
    code, out, err = _run(["history", "--store", path])
    assert code == 0 and "RTX PRO 6000 Blackwell~" in out, err
    assert not _too_wide(out), _too_wide(out)[:3]
