"""compare: the same problems in two environments, from saved files and from the store."""
import json
import os

from conftest import REPO, run_cli
from cudnn_explorer.core.exploration import Exploration
from cudnn_explorer.report.compare import render_compare
from cudnn_explorer.store.db import Store
from cudnn_explorer.core.options import ExploreOptions

REF = os.path.join(REPO, "data", "reference", "h200-default-fp32.json")


def other_env(pick_tag=None):
    """The H200 reference as if measured with another cuDNN, PyTorch's fwd pick changed."""
    d = json.load(open(REF))
    d["environment"]["cudnn_runtime"] = "92400"
    fwd = d["directions"][0]
    for p in fwd["pytorch"]:
        if pick_tag and p["mode"] == "benchmark":
            p["engine_tag"] = pick_tag
            p["steady"]["median_ms"] *= 1.25
    return Exploration.from_dict(d)


def items(*exps):
    return [(e.problem, e.environment, d) for e in exps for d in e.directions]


def test_compare_real_h200_against_another_environment():
    ref = Exploration.from_json(open(REF, "rb").read())
    text = render_compare(items(ref, other_env()))
    assert "2 environment(s): H200 cudnn9.19.0 torch2.11.0" in text
    assert "H200 cudnn9.24.0" in text
    assert "same in every environment for 3 of 3" in text
    text = render_compare(items(ref, other_env("ConvFwd_eng1_k2=4_k3=0")))
    assert "same in every environment for 2 of 3" in text and "eng1_k2=4_k3=0" in text
    assert all(len(line) <= 120 for line in text.splitlines())
    assert "nothing to compare" in render_compare(items(ref))


def test_compare_command_reads_the_store_and_files(tmp_path):
    store = str(tmp_path / "s.db")
    other = other_env("ConvFwd_eng1_k2=4_k3=0")
    with Store(store) as s:
        opts = ExploreOptions.create()
        for d in other.directions:
            s.save(other.problem, other.environment, opts, other.measurement, d)
    r = run_cli("compare", "--store", store, "--file", REF)
    assert r.returncode == 0, r.stderr
    assert "for 2 of 3 problem-directions" in r.stdout
    r = run_cli("compare", "--store", store, "--file", REF, "--cudnn", "9.19.0")
    assert r.returncode == 0 and "nothing to compare" in r.stdout
    r = run_cli("compare", "--no-store", "--file", str(tmp_path / "missing.json"))
    assert r.returncode == 2 and "missing.json" in r.stderr
    r = run_cli("compare", "--no-store", "--file", REF, "--gpu", "A100")
    assert r.returncode == 2 and "no result matches the filters GPU 'A100'" in r.stderr
    notdb = tmp_path / "notes.txt"  # a store the user named that is no store: their
    # mistake, exit 2, as a missing one is
    notdb.write_text("not a database\n" * 100)
    r = run_cli("compare", "--store", str(notdb), "--file", REF)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "notes.txt" in lines[0], r.stderr


def test_export_writes_every_stored_exploration_and_compare_reads_it(tmp_path):
    ref = Exploration.from_json(open(REF, "rb").read())
    other = other_env("ConvFwd_eng1_k2=4_k3=0")
    db = str(tmp_path / "r.db")
    opts = ExploreOptions.from_dict(ref.measurement.options)
    with Store(db) as store:
        for exp in (ref, other):
            for d in exp.directions:
                store.save(exp.problem, exp.environment, opts, exp.measurement, d)
        got = store.explorations()
    assert [len(e.directions) for e in got] == [3, 3]
    assert {e.environment.cudnn_runtime for e in got} == {"91900", "92400"}
    out_json, out_csv = tmp_path / "all.json", tmp_path / "all.csv"
    r = run_cli("export", "--store", db, "--json", str(out_json), "--csv", str(out_csv))
    assert r.returncode == 0 and "exported 2 stored explorations" in r.stderr, r.stderr
    doc = json.loads(out_json.read_text())
    assert doc["schema"] == "cudnn_explorer.export" and len(doc["explorations"]) == 2
    lines = out_csv.read_text().splitlines()
    assert sum(ln.startswith("schema_version,") for ln in lines) == 1  # one header
    kinds = {ln.split(",")[1] for ln in lines[1:]}
    assert kinds == {"legacy", "engine", "pytorch"}
    r = run_cli("compare", "--no-store", "--file", str(out_json))
    assert r.returncode == 0 and "same in every environment for 2 of 3" in r.stdout, r.stderr
    r = run_cli("export", "--store", db, "--json", str(out_json), "--gpu", "A100")
    assert r.returncode == 2 and r.stderr.strip().endswith(
        "no result matches the filters GPU 'A100'; valid: a part of a GPU name or a cuDNN "
        "version of those there: NVIDIA H200 (cuDNN 9.19.0), NVIDIA H200 (cuDNN 9.24.0)"), r.stderr
    r = run_cli("compare", "--store", db, "--cudnn", "abc")
    assert r.returncode == 2 and "compare: no result matches the filters cuDNN 'abc'" in r.stderr
    for args, match in [(["export", "--store", db], "give --json PATH and/or --csv PATH"),
                        (["export", "--store", str(tmp_path / "no.db"), "--csv", "x.csv"],
                         "no such file")]:
        r = run_cli(*args)
        assert r.returncode == 2 and match in r.stderr, r.stderr


def test_compare_reads_model_sweeps_and_names_a_file_of_another_kind(tmp_path):
    """Two saved sweeps of a model (the H200 reference, and the same as if measured with
    another cuDNN, gzip-compressed too): every problem-direction side by side."""
    import gzip

    sweep = os.path.join(REPO, "data", "reference", "h200-resnet50-b32-amp-fp16-nhwc.json.gz")
    d = json.loads(gzip.decompress(open(sweep, "rb").read()))
    for e in d["entries"]:
        e["exploration"]["environment"]["cudnn_runtime"] = "92400"
    other = tmp_path / "other.json"
    other.write_text(json.dumps(d))
    r = run_cli("compare", "--no-store", "--file", sweep, "--file", str(other))
    assert r.returncode == 0, r.stderr
    assert "2 environment(s)" in r.stdout and "H200 cudnn9.24.0" in r.stdout
    assert "for 68 of 68 problem-directions" in r.stdout  # the same picks: a copy
    for args in (["--load", sweep], ["plot", "pareto", sweep, "--out", str(tmp_path / "p")]):
        r = run_cli(*args)
        assert r.returncode == 2 and "a model sweep: render it with 'model --load FILE'" \
            in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
