"""The records our child processes send: versioned, read with the saved files' rules, and
refused with the path of a bad field, by the parent and from the results store alike."""
import json
import os
import textwrap

import pytest

from cudnn_explorer.core.child_records import (MODEL_CHILD_SCHEMA, PROBLEM_CHILD_SCHEMA,
                                               ModelChildResult, ProblemChildResult)
from cudnn_explorer.core.errors import ChildError, UserError
from fakes import FIX


def _fixture(name):
    with open(os.path.join(FIX, name)) as f:
        return json.load(f)


def test_a_result_without_a_schema_reads_as_version_1_and_round_trips():
    raw = _fixture("default_benchmark.result.json")  # an H200 child's, before the schema
    r = ProblemChildResult.read(raw, "result")
    assert [d.direction for d in r.directions] == ["fwd", "bwd-data", "bwd-filter"]
    assert r.direction("fwd").steady.method == "graph" and r.settings["benchmark_limit"] == 10
    d = r.to_dict()
    assert d["schema"] == PROBLEM_CHILD_SCHEMA and d["schema_version"] == 1
    assert ProblemChildResult.read(json.loads(json.dumps(d)), "again") == r
    legacy = ProblemChildResult.read(_fixture("default_benchmark_legacy.result.json"), "r")
    assert legacy.directions and ModelChildResult().to_dict()["schema"] == MODEL_CHILD_SCHEMA


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(schema="cudnn_explorer.sweep"), "result: schema is"),
    (lambda d: d.update(schema_version=2), "result: schema_version 2"),
    (lambda d: d["directions"][0].update(first_call_ms="soon"),
     "result.directions[0].first_call_ms"),
    (lambda d: d["directions"][1]["steady"].update(median_ms=-1.0),
     "result.directions[1].steady.median_ms"),
    (lambda d: d["directions"][0].pop("direction"), "result.directions[0].direction: missing"),
])
def test_a_malformed_result_names_its_bad_field(edit, match):
    raw = _fixture("default_benchmark.result.json")
    edit(raw)
    with pytest.raises(UserError, match=match.replace("[", r"\[").replace("]", r"\]")):
        ProblemChildResult.read(raw, "result")


def test_the_parent_refuses_a_malformed_childs_result(tmp_path, monkeypatch):
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.core.problem import ConvProblem
    from cudnn_explorer.measure.pytorch_picks import ModeSpec, run_child

    (tmp_path / "bad_child.py").write_text(textwrap.dedent("""\
        import json, sys
        spec = json.load(open(sys.argv[1]))
        open(spec["log_file"], "w").write("a log")
        json.dump({"directions": [{"direction": "fwd", "first_call_ms": "soon",
                   "first_peak_alloc_bytes": 0, "first_reserved_growth_bytes": 0}]},
                  open(sys.argv[2], "w"))
        """))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    p = ConvProblem.create("2,4,8,8", out_channels=4)
    with pytest.raises(ChildError, match="wrote a malformed result: result.directions"):
        run_child(p, ModeSpec("benchmark", "benchmark"),
                  ExploreOptions.create(directions="fwd", child_timeout_s=30),
                  child_module="bad_child")


def test_the_store_keeps_a_models_per_problem_picks_as_they_were_built(tmp_path):
    from cudnn_explorer.core.records import PyTorchPick
    from cudnn_explorer.store.db import Store
    from fakes import ENV

    pick = PyTorchPick(label="benchmark", mode="benchmark", api="engine", benchmark_limit=10,
                       first_call_ms=12.5, engine_tag="eng0_k2=1", candidates=[{"tag": "x"}],
                       timed=[["eng0_k2=1", 0.5]], numeric_notes=["TENSOR_CORE"])
    with Store(str(tmp_path / "s.db")) as store:
        store.save_model_run("k", ENV, "m", "benchmark", {}, {"0": {"fwd": pick.to_dict()}})
        _, per, _ = store.lookup_model_run("k", ENV)
    assert PyTorchPick.from_dict(per["0"]["fwd"], "stored") == pick