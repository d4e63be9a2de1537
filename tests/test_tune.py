"""tune on the CPU, through the fake native layer: a record's problem-directions become one
plan file whose keys are the record's own (the op looks plans up by them), --add adds only
what the file lacks, the results store answers a second run, and each bad input is one
line with exit 2."""
import dataclasses
import json
import os

import pytest

torch = pytest.importorskip("torch")

from conftest import requires_ext  # noqa: E402
from cudnn_explorer.cli.main import main  # noqa: E402
from cudnn_explorer.core.errors import UserError  # noqa: E402
from cudnn_explorer.core.plans import native_key, native_key_of  # noqa: E402
from cudnn_explorer.core.problem import ConvProblem  # noqa: E402
from cudnn_explorer.core.zero_code import ConvRecord, RecordedConv, merge_records  # noqa: E402
from cudnn_explorer.jobs import lazy_measure  # noqa: E402
from cudnn_explorer.jobs.tune import problems_of, tune  # noqa: E402
from cudnn_explorer.measure import pipeline  # noqa: E402
from fakes import ENV, FakeBench  # noqa: E402

P1 = ConvProblem.create("8,64,28,28", dtype="float16", layout="nhwc")
P2 = ConvProblem.create("8,32,14,14", out_channels=32, dtype="float16", layout="nhwc")
P3 = ConvProblem.create("4,16,28,28", out_channels=16, kernel=1, dtype="float16",
                        layout="nhwc")
RECORDED = [(P1, "fwd"), (P1, "bwd-filter"), (P2, "fwd"), (P3, "bwd-data")]


def record_of(pairs) -> ConvRecord:
    return merge_records([ConvRecord(convs=[
        RecordedConv(key=native_key_of(p, d), description=f"{p.describe()} {d}",
                     calls=100 - i) for i, (p, d) in enumerate(pairs)], pid=1)])


def write_record(path, pairs) -> str:
    path.write_text(record_of(pairs).to_json())
    return str(path)


def keys(plans):
    return sorted(tuple(native_key(e)) for e in plans.entries)


def recorded_keys(pairs):
    return sorted(tuple(native_key_of(p, d)) for p, d in pairs)


def test_the_record_is_grouped_by_problem_in_the_directions_recorded():
    problems, unusable = problems_of(record_of(RECORDED))
    assert [(t.problem, t.directions) for t in problems] == [
        (P1, ("fwd", "bwd-filter")), (P2, ("fwd",)), (P3, ("bwd-data",))]
    assert [list(k) for t in problems for k in t.keys] == \
        [native_key_of(p, d) for p, d in RECORDED]
    assert unusable == []
    # what a plan file has already is left out; a key that is no convolution is said
    bad = dataclasses.replace(record_of([(P2, "fwd")]).convs[0], key=[1, 2, 3], problem=None,
                              direction="", why="key [1, 2, 3]: not a key")
    rec = dataclasses.replace(record_of(RECORDED), convs=record_of(RECORDED).convs + [bad])
    problems, unusable = problems_of(rec, have=[native_key_of(P1, "fwd")])
    assert [(t.problem, t.directions) for t in problems][0] == (P1, ("bwd-filter",))
    assert len(unusable) == 1 and "not a key" in unusable[0]


@requires_ext
def test_tune_writes_plans_keyed_as_the_record_and_a_second_run_measures_nothing(
        tmp_path, monkeypatch):
    bench = FakeBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    children = []
    bench.children = lambda *a: children.append(a)  # PyTorch's: the "best" policy runs none
    rec = write_record(tmp_path / "convs.json", RECORDED)
    db = str(tmp_path / "s.db")
    said = []
    first = tune(rec, store=db, bench=bench, progress=said.append)
    # the crucial check: the op looks a plan up by the key it gives the call, the record's
    assert keys(first.plans) == recorded_keys(RECORDED)
    assert first.complete and first.done == 3 and first.measured == 4 and first.answered == 0
    assert first.plans.policy == "best" and first.plans.environment.gpu_name == ENV.gpu_name
    assert any(m.startswith("problem 3/3: ") for m in said)
    assert children == []
    calls = len(bench.calls)
    again = tune(rec, store=db, bench=bench)
    assert len(bench.calls) == calls  # nothing measured again
    assert again.measured == 0 and again.answered == 4
    assert [e.to_dict() for e in again.plans.entries] == \
        [e.to_dict() for e in first.plans.entries]
    # only the directions recorded: a record of P2's fwd alone gives one plan
    one = tune(record_of([(P2, "fwd")]), store=db, bench=bench)
    assert keys(one.plans) == recorded_keys([(P2, "fwd")])


@requires_ext
def test_add_tunes_only_what_the_file_lacks_and_keeps_its_entries(tmp_path, monkeypatch):
    fake_cli(tmp_path, monkeypatch)
    out, db = tmp_path / "plans.json", str(tmp_path / "s.db")
    rec = write_record(tmp_path / "convs.json", RECORDED[:2])
    assert main(["tune", rec, "-o", str(out), "--store", db, "--quiet"]) == 0
    before = json.loads(out.read_text())
    misses = write_record(tmp_path / "misses", RECORDED[1:])  # one the file has, two new
    bench = fake_cli(tmp_path, monkeypatch)
    assert main(["tune", misses, "-o", str(out), "--add", "--no-store", "--quiet"]) == 0
    after = json.loads(out.read_text())
    assert after["entries"][:2] == before["entries"]  # the old ones first, unchanged
    text = out.read_text()
    for e in before["entries"]:  # byte-identical in the file too
        assert json.dumps(e, indent=1).replace("\n", "\n  ") in text
    from cudnn_explorer.jobs.plans import read_plans

    assert keys(read_plans(str(out))) == recorded_keys(RECORDED)
    explored = [c for c in bench.calls if c[0] == "hold"]
    assert sorted(c[1] for c in explored) == ["bwd-data", "fwd"]  # P2 fwd, P3 bwd-data only
    # all covered already: nothing measured, the file left as it is
    mtime = out.stat().st_mtime_ns
    assert main(["tune", misses, "-o", str(out), "--add", "--no-store", "--quiet"]) == 0
    assert out.stat().st_mtime_ns == mtime


def fake_cli(tmp_path, monkeypatch):
    """The CLI's job measuring through a FakeBench, as if on a GPU."""
    bench = FakeBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    monkeypatch.setattr(pipeline, "GpuBench", lambda device, keep_worker=None: bench)
    monkeypatch.setattr(lazy_measure, "require_driver", lambda: None)
    monkeypatch.setattr(lazy_measure, "frontend_built", lambda device: True)
    return bench


@requires_ext
def test_add_refuses_a_plan_file_from_another_environment(tmp_path, monkeypatch, capsys):
    fake_cli(tmp_path, monkeypatch)
    out = tmp_path / "plans.json"
    rec = write_record(tmp_path / "convs.json", RECORDED[:1])
    assert main(["tune", rec, "-o", str(out), "--no-store", "--quiet"]) == 0
    d = json.loads(out.read_text())
    d["environment"]["gpu_name"] = "NVIDIA A100"
    out.write_text(json.dumps(d, indent=1) + "\n")
    before = out.read_text()
    capsys.readouterr()
    misses = write_record(tmp_path / "misses", RECORDED[2:])
    assert main(["tune", misses, "-o", str(out), "--add", "--no-store", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "another environment" in err and "A100" in err
    assert out.read_text() == before  # the old file is never lost


@pytest.mark.parametrize("setup, extra, match", [
    ("missing", [], "No such file or directory"),
    ("bad json", [], "record file"),
    ("empty", [], "no problem-direction to tune"),
    ("exists", [], "exists; --add adds to it, --force replaces it"),
    ("ok", ["--add"], "no plan file to add to"),
    ("ok", ["--policy", "fastest"], "--policy 'fastest': valid: best, pytorch"),
    ("ok", ["--profile", "deep"], "--profile deep: valid: quick, thorough"),
    ("ok", ["--add", "--force"], "--force would be ignored"),
    ("ok", ["--no-store", "--refresh"], "--refresh would be ignored"),
    ("ok", ["--max-workspace", "-1"], "--max-workspace"),
    ("ok", ["--device", "x"], "--device"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, capsys, setup, extra, match):
    rec, out = tmp_path / "convs.json", tmp_path / "plans.json"
    if setup == "bad json":
        rec.write_text("{not json")
    elif setup == "empty":
        rec.write_text(ConvRecord().to_json())
    elif setup != "missing":
        write_record(rec, RECORDED)
    if setup == "exists":
        out.write_text("{}")
    assert main(["tune", str(rec), "-o", str(out), "--no-store"] + extra) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and match in err, err
    assert setup == "exists" or not out.exists()


def test_no_gpu_is_one_line_exit_3(tmp_path, monkeypatch, capsys):
    from cudnn_explorer.measure import driver

    monkeypatch.setattr(driver, "no_gpu_reason", lambda: "no NVIDIA driver")
    rec = write_record(tmp_path / "convs.json", RECORDED)
    assert main(["tune", rec, "-o", str(tmp_path / "p.json"), "--no-store"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no usable CUDA GPU" in err


def test_the_job_checks_its_arguments_by_name(tmp_path):
    with pytest.raises(UserError, match="record int: valid"):
        tune(3)
    rec = write_record(tmp_path / "convs.json", RECORDED)
    with pytest.raises(UserError, match="policy 'fast': valid: best, pytorch"):
        tune(rec, policy="fast")
    from cudnn_explorer import ExploreOptions

    with pytest.raises(UserError, match="policy 'pytorch' freezes PyTorch's own pick"):
        tune(rec, ExploreOptions.create(pytorch=False), policy="pytorch")
    import cudnn_explorer as ce

    assert ce.tune is tune and "tune" in ce.__all__


@requires_ext
def test_ctrl_c_writes_what_finished_beside_out_and_the_same_command_goes_on(
        tmp_path, monkeypatch, capsys):
    fake_cli(tmp_path, monkeypatch)
    real, seen = pipeline.explore, []

    def explore(problem, options, **kw):
        seen.append(problem)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return real(problem, options, **kw)

    monkeypatch.setattr(pipeline, "explore", explore)
    out, db = tmp_path / "plans.json", str(tmp_path / "s.db")
    rec = write_record(tmp_path / "convs.json", RECORDED)
    args = ["tune", rec, "-o", str(out), "--store", db, "--quiet"]
    assert main(args) == 130
    err = capsys.readouterr().err
    assert not out.exists()  # the plan file run loads is never one that lacks problems
    assert "1 of 3 problems tuned" in err and "plans.json.partial" in err
    from cudnn_explorer.jobs.plans import read_plans

    assert keys(read_plans(str(out) + ".partial")) == recorded_keys(RECORDED[:2])
    monkeypatch.setattr(pipeline, "explore", real)
    seen.clear()
    assert main(args) == 0
    assert keys(read_plans(str(out))) == recorded_keys(RECORDED)
    assert "2 measured, 2 answered from the results store" in capsys.readouterr().err


def _tune_rank(rank, port, tmp, out_dir, fail):
    """One rank of `tune` under torchrun, through the command line, measuring through a
    FakeBench (as fake_cli, without pytest's monkeypatch in a spawned process); ``fail``:
    rank 1 cannot explore any problem (out of memory)."""
    import pathlib
    import types

    from cudnn_explorer.model import distributed

    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2",
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    patch = types.SimpleNamespace(setenv=os.environ.__setitem__)
    bench = FakeBench(pathlib.Path(tmp) / f"fake{rank}", patch)
    pipeline.environment = lambda device=0: bench.environment()
    made = []  # the benches the rank opened: one, for rank 0's two passes too
    pipeline.GpuBench = lambda device, keep_worker=None: made.append(device) or bench
    closed, close = [], bench.close
    bench.close = lambda: closed.append(1) or close()
    lazy_measure.require_driver = lambda: None
    lazy_measure.frontend_built = lambda device: True
    distributed.device_id = lambda local_rank: f"GPU-{local_rank} on host"
    pipeline.native.require_gpu = lambda device=0: None
    if fail and rank == 1:
        from cudnn_explorer.core.errors import ResourceError
        from cudnn_explorer.jobs import tune as tune_job

        def oom(*a, **k):
            raise ResourceError("out of GPU memory (fake)")
        if fail == "share":  # the whole share stops at once (not problem by problem)
            tune_job.tune = oom
        else:
            pipeline.explore = oom
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = main(["tune", os.path.join(tmp, "convs.json"), "-o",
                     os.path.join(tmp, "plans.json"), "--store", os.path.join(tmp, "s.db"),
                     "--quiet"])
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"code": code, "labs": len([c for c in bench.calls if c[0] == "hold"]),
                   "err": err.getvalue(), "benches": made, "closed": len(closed)}, f)


@requires_ext
@pytest.mark.parametrize("fail", ["", "problems", "share"],
                         ids=["ok", "rank1-problems-fail", "rank1-share-fails"])
def test_under_torchrun_the_ranks_share_the_problems_and_rank_0_writes_one_file(tmp_path,
                                                                                 fail):
    import multiprocessing
    import socket

    (tmp_path / "fake0").mkdir()
    (tmp_path / "fake1").mkdir()
    write_record(tmp_path / "convs.json", RECORDED)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_tune_rank, args=(r, port, str(tmp_path), str(tmp_path),
                                                  fail), daemon=True) for r in range(2)]
    try:
        for p in procs:
            p.start()
        for p in procs:
            p.join(180)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
    assert [p.exitcode for p in procs] == [0, 0]
    res = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["benches"] for r in res] == [[0], [1]]  # one bench a rank, on its own GPU
    assert [r["closed"] for r in res] == [1, 1]  # and closed once, failed share or not
    if fail:  # rank 1 says it failed (exit 0: torchrun would stop rank 0); rank 0's pass
        assert [r["code"] for r in res] == [0, 0]  # measures its share: one complete file
        assert res[0]["labs"] == len(RECORDED) and res[1]["labs"] == 0
        assert "out of GPU memory (fake)" in res[1]["err"] or "1 failed" in res[1]["err"]
        assert "rank 0 writes" in res[1]["err"]
    else:
        # every recorded direction explored once, split between the ranks (hold: one per
        # direction explored), none again in rank 0's pass over the whole record
        assert [r["code"] for r in res] == [0, 0]
        assert res[0]["labs"] + res[1]["labs"] == len(RECORDED) and res[1]["labs"] > 0
    from cudnn_explorer.jobs.plans import read_plans

    assert keys(read_plans(str(tmp_path / "plans.json"))) == recorded_keys(RECORDED)


def test_under_torchrun_the_store_is_needed(tmp_path):
    from cudnn_explorer.jobs.tune import tune_rank
    from cudnn_explorer.model.distributed import World

    rec = write_record(tmp_path / "convs.json", RECORDED[:1])
    with pytest.raises(UserError, match="--no-store: under torchrun"):
        tune_rank(rec, World(0, 0, 2), store=False)


def test_under_torchrun_an_adds_policy_is_resolved_before_the_ranks_meet(tmp_path, monkeypatch):
    """tune_rank reads the policy as tune() does (an add's own): a given one that differs
    is the one-line refusal, before any process group is started."""
    from cudnn_explorer.jobs.tune import tune_rank
    from cudnn_explorer.model import distributed
    from cudnn_explorer.model.distributed import World

    fake_cli(tmp_path, monkeypatch)
    out, db = tmp_path / "plans.json", str(tmp_path / "s.db")
    rec = write_record(tmp_path / "convs.json", RECORDED[:1])
    assert main(["tune", rec, "-o", str(out), "--store", db, "--quiet"]) == 0
    monkeypatch.setattr(distributed, "group", lambda *a, **k: pytest.fail("group started"))
    with pytest.raises(UserError, match="--policy pytorch: the plan file .* was written with "
                                        "--policy best"):
        tune_rank(rec, World(0, 0, 2), store=db, add=str(out), policy="pytorch")


@pytest.mark.parametrize("flag", [["--device", "1"], ["--no-store"]])
def test_under_torchrun_device_and_no_store_are_one_line_exit_2(tmp_path, monkeypatch, capsys,
                                                                flag):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("LOCAL_RANK", "0")
    rec = write_record(tmp_path / "convs.json", RECORDED[:1])
    assert main(["tune", rec, "-o", str(tmp_path / "p.json"), *flag]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "under torchrun" in err[0], err
