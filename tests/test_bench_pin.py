"""scripts/bench_pin.py without a GPU: a process's result kept with --keep is read back
for the same spec and plan file, and run again for another."""
import json
import os
import subprocess

import pytest

pytest.importorskip("torch")

from conftest import load_script  # noqa: E402  (after the skip)


@pytest.fixture
def bench():
    return load_script("bench_pin")


def test_a_kept_process_is_read_back_only_for_its_own_spec(bench, monkeypatch, tmp_path):
    from cudnn_explorer.core.child_records import ModelChildResult, SizeResult

    runs = []

    def fake_run(cmd, **kw):  # the model process: one size, its first iteration timed
        spec_path, result_path = cmd[-2], cmd[-1]
        with open(spec_path) as f:
            spec = json.load(f)
        runs.append(spec["mode"])
        r = ModelChildResult(sizes=[SizeResult(input_shape=[3, 8, 8],
                                               first_ms=10.0 * len(runs))])
        with open(result_path, "w") as f:
            json.dump(r.to_dict(), f)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    plans = tmp_path / "a.plans.json"
    plans.write_text('{"entries": []}')
    keep, tmp = str(tmp_path / "keep"), str(tmp_path)
    spec = {"mode": "pinned", "plans": str(plans), "steady_only": False}
    first, wall, _ = bench.child(spec, tmp, "pinned-first", 60, keep=keep)
    assert wall is not None and runs == ["pinned"] and first.sizes[0].first_ms == 10.0
    # the same spec and file, the file elsewhere (each call writes it anew): read back
    moved = tmp_path / "b.plans.json"
    moved.write_text(plans.read_text())
    # ... and written at another time from the same sweep: the same plans
    plans.write_text('{"entries": [], "created": "2026-12-01T10:00:00+00:00"}')
    moved.write_text('{"created": "2026-12-02T11:00:00+00:00", "entries": []}')
    again, wall, _ = bench.child(dict(spec, plans=str(moved)), tmp, "pinned-first", 60,
                                 keep=keep)
    assert wall is None and runs == ["pinned"] and again.sizes[0].first_ms == 10.0
    # another plan file, or another spec: run again, and kept anew
    moved.write_text('{"entries": [1]}')
    other, wall, _ = bench.child(dict(spec, plans=str(moved)), tmp, "pinned-first", 60,
                                 keep=keep)
    assert wall is not None and len(runs) == 2 and other.sizes[0].first_ms == 20.0
    _, wall, _ = bench.child(dict(spec, steady_only=True), tmp, "pinned-first", 60, keep=keep)
    assert wall is not None and len(runs) == 3
    # a kept result that does not read is run again, not trusted
    with open(os.path.join(keep, "pinned-first.result.json"), "w") as f:
        f.write("{")
    _, wall, _ = bench.child(dict(spec, steady_only=True), tmp, "pinned-first", 60, keep=keep)
    assert wall is not None and len(runs) == 4
