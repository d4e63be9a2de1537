"""The results store: round trip, keys, bad files, concurrent writers, and runs that answer
from it (the whole pipeline through the fake bench, with real child processes)."""
import dataclasses
import multiprocessing
import os
import sqlite3

import pytest

from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.store.db import SCHEMA_VERSION, Store, StoreError
from fakes import ENV, retimed_exploration

OPTS = ExploreOptions.create(directions="fwd", budget_ms=100)


def saved(store, exp=None, env=ENV, options=OPTS):
    exp = exp or retimed_exploration()
    for d in exp.directions:
        store.save(exp.problem, env, options, exp.measurement, d)
    return exp


def test_round_trip_and_keys(tmp_path):
    with Store(str(tmp_path / "r.db")) as store:
        exp = saved(store)
        got = store.lookup(exp.problem, ENV, OPTS)
        assert got is not None and got.directions == exp.directions
        assert got.measurement == exp.measurement and got.created
        # another environment, other options, another problem: not the same measurement
        assert store.lookup(exp.problem, dataclasses.replace(ENV, cudnn_runtime="92400"),
                            OPTS) is None
        assert store.lookup(exp.problem, ENV, ExploreOptions.create(directions="fwd",
                                                                    budget_ms=10)) is None
        assert store.lookup(exp.problem, ENV, ExploreOptions.create(directions="fwd,bwd-data",
                                                                    budget_ms=100)) is None
        # the device index does not change what was measured; the hostname is not a key
        assert store.lookup(exp.problem, dataclasses.replace(ENV, hostname="other"),
                            ExploreOptions.create(directions="fwd", budget_ms=100,
                                                  device=1)) is not None
        saved(store)  # measured again: replaced, not doubled
        assert store.count() == 1
        (row,) = store.history()
        assert row["gpu"] == "NVIDIA H200" and row["directions"] == "fwd"


def _version_1_store(path, exp):
    """A store as version 1 wrote it: its tables, and a result keyed on the environment
    fields of then (no cudnn-frontend version)."""
    import json
    from dataclasses import asdict

    from cudnn_explorer.store import db as dbmod

    old_fields = [f for f in dbmod._ENV_FIELDS if f != "cudnn_frontend"]
    d = asdict(ENV)
    env_json = {k: v for k, v in d.items() if k != "cudnn_frontend"}
    old_key = json.dumps({k: d.get(k, "") for k in old_fields}, sort_keys=True,
                         separators=(",", ":"))
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    for sql in dbmod.MIGRATIONS[0]:
        con.execute(sql)
    con.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    (dr,) = exp.directions
    con.execute(
        "INSERT INTO results (problem_key, direction, env_key, options_key, created, "
        "tool_version, gpu_name, cudnn, torch, problem_json, environment_json, "
        "measurement_json, direction_json) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
        (dbmod.problem_key(exp.problem), dr.direction, old_key, dbmod.options_key(OPTS),
         "2026-11-01T00:00:00+00:00", "0.1.0", ENV.gpu_name, ENV.cudnn_runtime,
         ENV.torch_version, json.dumps(exp.problem.to_dict()), json.dumps(env_json),
         json.dumps(asdict(exp.measurement)), json.dumps(dr.to_dict())))
    con.close()


def test_migration_from_version_1_keeps_results_under_the_new_key(tmp_path):
    path = str(tmp_path / "old.db")
    exp = retimed_exploration()
    _version_1_store(path, exp)
    with Store(path) as store:
        (version,) = store.db.execute(
            "SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        assert int(version) == SCHEMA_VERSION == 3
        assert store.count() == 1 and store.history()[0]["created"].startswith("2026-11-01")
        # the old result's cudnn-frontend version is not known: it answers only for ""
        unknown = dataclasses.replace(ENV, cudnn_frontend="")
        got = store.lookup(exp.problem, unknown, OPTS)
        assert got is not None and got.directions == exp.directions
        assert store.lookup(exp.problem, dataclasses.replace(ENV, cudnn_frontend="13200"),
                            OPTS) is None
    with Store(path) as store:  # opening again migrates nothing twice
        assert store.count() == 1


def test_bad_files_name_the_file(tmp_path):
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match="bad.db"):
        Store(str(bad))
    newer = tmp_path / "newer.db"
    Store(str(newer)).close()
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = '99' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match=f"schema version 99 is newer .*reads \\({SCHEMA_VERSION}\\)"):
        Store(str(newer))
    db = sqlite3.connect(newer)
    db.execute("UPDATE meta SET value = 'abc' WHERE key = 'schema_version'")
    db.commit()
    db.close()
    with pytest.raises(StoreError, match="schema version 'abc' is not a number: not a store"):
        Store(str(newer))
    with pytest.raises(StoreError, match="/dev/null/x.db"):
        Store("/dev/null/x.db")


def test_another_programs_database_is_left_as_it_was(tmp_path):
    from cudnn_explorer.store.db import NamedStoreError
    from conftest import run_cli

    other = tmp_path / "app.db"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE users (name TEXT)")
    db.execute("INSERT INTO users VALUES ('ada')")
    db.commit()
    db.close()
    before = other.read_bytes()
    with pytest.raises(NamedStoreError, match=r"app.db': an SQLite database of something "
                                              r"else \(tables users\); valid: a results store"):
        Store(str(other), named=True)
    r = run_cli("history", "--store", str(other))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert other.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == [
        "app.db"]
    shaped = tmp_path / "shaped.db"  # a meta table of another shape
    db = sqlite3.connect(shaped)
    db.execute("CREATE TABLE meta (name TEXT)")
    db.commit()
    db.close()
    with pytest.raises(NamedStoreError, match=r"something else \(tables meta\)"):
        Store(str(shaped), named=True)


def _writer(path, k, n):
    exp = retimed_exploration()
    with Store(path) as store:
        for i in range(n):
            env = dataclasses.replace(ENV, gpu_name=f"GPU {k}-{i}")
            saved(store, exp, env=env)


def test_two_concurrent_writers_lose_nothing(tmp_path):
    path = str(tmp_path / "c.db")
    Store(path).close()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k, 40)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with Store(path) as store:
        assert store.count() == 80


@pytest.mark.ext
def test_cli_answers_a_repeat_from_the_store(tmp_path, monkeypatch):
    """The CLI's store path, with the pipeline's GPU replaced by the fake bench."""
    import io
    from contextlib import redirect_stderr, redirect_stdout

    from cudnn_explorer import cli
    from cudnn_explorer.jobs import lazy_measure
    from cudnn_explorer.measure import pipeline
    from fakes import FakeBench

    bench = FakeBench(tmp_path, monkeypatch)
    calls = []
    real = pipeline.explore

    def explore(problem, options, **kw):
        calls.append(problem)
        assert kw["bench"] is bench  # the job's bench, started ahead
        return real(problem, options, **kw)

    monkeypatch.setattr(pipeline, "explore", explore)
    monkeypatch.setattr(pipeline, "GpuBench", lambda device: bench)
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    monkeypatch.setattr(lazy_measure, "frontend_built", lambda device: True)
    store = str(tmp_path / "s.db")
    argv = ["--shape", "8,64,28,28", "--dtype", "float16", "--layout", "nhwc", "--direction",
            "fwd", "--budget-ms", "5", "--child-timeout", "30", "--engine-budget-s", "30",
            "--store", store]

    def run(extra=(), base=argv):
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(base + list(extra))
        return code, out.getvalue(), err.getvalue()

    code, first, _ = run()
    assert code == 0 and len(calls) == 1
    code, again, err = run()
    assert code == 0 and len(calls) == 1 and "answered from the results store" in err
    assert again.split("\n", 2)[2] == first.split("\n", 2)[2]  # same report, same numbers
    code, _, err = run(["--refresh"])
    assert code == 0 and len(calls) == 2 and "answered from" not in err
    code, out, err = run(["--no-store"])
    assert code == 2 and "--store would be ignored: --no-store" in err
    code, out, err = run(["--no-store"], base=argv[:-2])
    assert code == 0 and len(calls) == 3
    (tmp_path / "broken.db").write_text("garbage" * 100)
    code, out, err = run(["--store", str(tmp_path / "broken.db")], base=argv[:-2])
    assert code == 0 and len(calls) == 4 and "broken.db" in err and "without the store" in err


KILLED_SWEEP = '''
import os, signal, sys, types
sys.path.insert(0, {tests!r})
import torch
from fakes import FakeBench
from test_model_sweep import small_capture, OPTS
from cudnn_explorer.model.explore_problems import StoredProblems, sweep
from cudnn_explorer.store.db import Store

store = Store({db!r})
bench = FakeBench(__import__("pathlib").Path({tmp!r}), types.SimpleNamespace(
    setenv=lambda k, v: os.environ.__setitem__(k, v)))
env = bench.environment()
done = []

def saver(problem, one):
    def save(env, measurement, d):
        store.save(problem, env, one, measurement, d)
        done.append(d.direction)
        if len(done) == 3:  # problem 2's first direction is stored: killed in its middle
            os.kill(os.getpid(), signal.SIGKILL)
    return save

sweep(small_capture(), OPTS, bench=bench,
      stored=StoredProblems(lambda p, o: store.lookup(p, env, o, partial=True), saver))
'''


@pytest.mark.ext
def test_sweep_killed_then_run_again_measures_only_the_rest(tmp_path, monkeypatch):
    """SIGKILL in the middle of a problem; running again answers every stored direction
    from the store and measures only the missing ones, each once."""
    import subprocess
    import sys

    from conftest import REPO
    from cudnn_explorer.measure import pipeline
    from cudnn_explorer.model.explore_problems import StoredProblems, sweep
    from fakes import FakeBench
    from test_model_sweep import OPTS, small_capture

    db = str(tmp_path / "k.db")
    code = KILLED_SWEEP.format(tests=os.path.join(REPO, "tests"), db=db, tmp=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == -9, r.stderr[-2000:]
    with Store(db) as store:
        assert store.count() == 3  # problem 1: fwd + bwd-filter; problem 2: its first one
    bench = FakeBench(tmp_path, monkeypatch)
    measured = []
    real = pipeline.explore

    def explore(problem, options, **kw):
        measured.append(options.directions)
        return real(problem, options, **kw)

    monkeypatch.setattr(pipeline, "explore", explore)
    with Store(db) as store:
        env = bench.environment()
        sw = sweep(small_capture(), OPTS, bench=bench, stored=StoredProblems(
            lambda p, o: store.lookup(p, env, o, partial=True),
            lambda p, o: (lambda e, m, d: store.save(p, e, o, m, d))))
        assert store.count() == 5
    assert measured == [("bwd-data", "bwd-filter")]  # problem 2's rest, nothing twice
    assert sw.complete and [d.direction for d in sw.entry(1).exploration.directions] == [
        "fwd", "bwd-data", "bwd-filter"]
