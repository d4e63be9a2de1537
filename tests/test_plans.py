"""Plan files on the CPU: written from the saved H200 ResNet-50 sweep, every field
validated on reading, an environment that differs refused by name, and the choice
policies and filters."""
import copy
import dataclasses
import gzip
import json
import os

import pytest

from conftest import REPO, run_cli
from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.plans import PlanFile, PlanKey, choose
from cudnn_explorer.core.model_sweep import ModelSweep
from cudnn_explorer.jobs.plans import read_plans, write_plans
from fakes import ENV

SWEEP = os.path.join(REPO, "data", "reference", "h200-resnet50-b32-amp-fp16-nhwc.json.gz")


def _sweep():
    return ModelSweep.from_dict(json.loads(gzip.decompress(open(SWEEP, "rb").read())))


def test_best_plans_of_a_sweep_are_its_fastest_allowed_configs():
    plans = write_plans(SWEEP)
    sw = _sweep()
    assert len(plans.entries) == 68 and not plans.skipped
    assert plans.environment.gpu_name == "NVIDIA H200" and plans.policy == "best"
    for e in plans.entries:
        d = next(x for en in sw.entries for x in en.exploration.directions
                 if en.exploration.problem == e.problem and x.direction == e.key.direction)
        best = d.engines.best(allowed_only=True)
        assert (e.tag, e.median_ms, e.workspace_bytes) == (best.tag, best.time,
                                                          best.workspace_bytes or 0)
        assert e.key == PlanKey.of(e.problem, e.key.direction, False)
        assert e.calls >= 1 and e.layers
    first = plans.entries[0]  # conv1: NHWC strides, channels innermost
    assert first.key.x_dims == [32, 3, 224, 224] and first.key.x_strides == [150528, 1, 672, 3]
    again = PlanFile.read(plans.to_json())
    assert again == plans


def test_the_pytorch_policy_freezes_benchmark_modes_pick_and_filters_apply():
    sw = _sweep()
    d = sw.entries[1].exploration.directions[0]
    pick = d.pytorch_pick("benchmark")
    c, why = choose(d, "pytorch")
    assert c.tag == pick.engine_tag and "frozen" in why
    best, why = choose(d, "best")
    assert best.time <= c.time and "fastest of" in why
    capped, why = choose(d, "best", max_workspace_bytes=0)
    assert capped is None or (capped.workspace_bytes or 0) == 0
    det, _ = choose(d, "best", deterministic=True)
    assert det is None or "NONDETERMINISTIC" not in det.numeric_notes
    plans = write_plans(SWEEP, policy="pytorch", max_workspace_mib=1, deterministic=True)
    assert plans.deterministic_only and all(e.key.deterministic for e in plans.entries)
    assert all(e.workspace_bytes <= 2**20 for e in plans.entries)
    assert plans.skipped and all(": " in s for s in plans.skipped)
    assert len(plans.entries) + len(plans.skipped) == 68
    with pytest.raises(UserError, match='policy "fastest": valid: best, pytorch'):
        choose(d, "fastest")
    for cap in (-1, float("nan"), "x"):  # the cap is checked as the option is
        with pytest.raises(UserError, match="max_workspace_mib .*: valid: a number of MiB"):
            write_plans(SWEEP, max_workspace_mib=cap)
    with pytest.raises(UserError, match="plans PlanFile: give a plan file's path"):
        read_plans(plans)


@pytest.mark.parametrize("edit,match", [
    (lambda d: d.update(schema="cudnn_explorer.sweep"), "not a cudnn_explorer plan file"),
    (lambda d: d.update(schema_version=2), "schema_version 2"),
    (lambda d: d.update(policy="fastest"), "policy: \"fastest\": valid: best, pytorch"),
    (lambda d: d["entries"][3]["key"].update(groups=2), r"entries\[3\].key: not the key"),
    (lambda d: d["entries"][3].update(tag="eng5"), r"entries\[3\].tag: \"eng5\" is not"),
    (lambda d: d["entries"][3].update(engine=99), r"entries\[3\]: engine 99 and knobs"),
    (lambda d: d["entries"][3].update(workspace_bytes=-1), r"entries\[3\].workspace_bytes"),
    (lambda d: d["entries"].append(copy.deepcopy(d["entries"][0])), "a second plan"),
    (lambda d: d["environment"].update(gpu_name=3), "environment.gpu_name"),
])
def test_every_bad_field_is_named(edit, match):
    d = json.loads(write_plans(SWEEP).to_json())
    edit(d)
    with pytest.raises(UserError, match=match):
        PlanFile.read(json.dumps(d))


def test_an_environment_that_differs_is_refused_naming_what_differs():
    plans = write_plans(SWEEP)
    here = dataclasses.replace(ENV, cudnn_runtime="92400", cudnn_frontend="13200",
                               torch_version="2.11.0+cu130")
    with pytest.raises(UserError, match="cuDNN 9.24.0 here, 9.19.0 in the file"):
        plans.check_environment(here)
    assert plans.check_environment(here, override=True) == ["cuDNN 9.24.0 here, 9.19.0 in "
                                                            "the file"]
    same = dataclasses.replace(here, cudnn_runtime="91900")
    assert plans.check_environment(same) == []


def test_the_plans_verb(tmp_path):
    out = tmp_path / "r50.plans.json"
    r = run_cli("plans", "write", SWEEP, "-o", str(out), "--policy", "pytorch")
    assert r.returncode == 0 and "policy pytorch" in r.stdout, r.stderr
    assert PlanFile.read(out.read_text()).policy == "pytorch"
    r = run_cli("plans", "show", str(out))
    assert r.returncode == 0 and "eng63" in r.stdout and "frozen" in r.stdout
    for args, match in [(["plans"], "give an action"), (["plans", "run"], "valid: write"),
                        (["plans", "write", SWEEP], "give -o FILE"),
                        (["plans", "show", str(out), "--policy", "best"],
                         "--policy would be ignored"),
                        (["plans", "write", SWEEP, "-o", str(out), "--policy", "x"],
                         "--policy 'x': valid"),
                        (["plans", "show", str(tmp_path / "none.json")], "none.json")]:
        r = run_cli(*args, env={"CUDA_VISIBLE_DEVICES": ""})
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and match in lines[-1], (args, r.stderr)
    r = run_cli("plans", "check", str(out), env={"CUDA_VISIBLE_DEVICES": ""})
    assert "valid: 68 plans" in r.stdout and r.returncode == 3  # no GPU to compare with


def test_mutated_plan_files_are_refused_or_read_whole():
    """Any one field of a plan file replaced by junk: reading it either names the bad field
    (UserError) or gives a PlanFile that writes back to what was read; a number made
    negative, NaN or infinite is always refused."""
    import random

    from test_cli_fuzz import _REPLACEMENTS, _leaves, _set

    base = json.loads(write_plans(SWEEP).to_json())
    paths = list(_leaves(base))
    rng = random.Random(2026)
    refused = 0
    for _ in range(400):
        path = rng.choice(paths)
        value = rng.choice(_REPLACEMENTS + ["", 0, 1, 2**40, [1], [[1, 2]], "eng0"])
        old = base
        for k in path:
            old = old[k] if isinstance(old, (dict, list)) else None
        numeric = isinstance(old, (int, float)) and not isinstance(old, bool)
        must_fail = numeric and isinstance(value, (int, float)) and not isinstance(
            value, bool) and (value != value or value in (float("inf"), -1, -0.5, 10**400))
        try:
            plans = PlanFile.read(json.dumps(_set(base, path, value), allow_nan=True))
        except UserError as e:
            assert str(e) and "Traceback" not in str(e)
            refused += 1
            continue
        assert not must_fail, (path, value)
        assert PlanFile.read(plans.to_json()) == plans, (path, value)
    assert refused > 200
