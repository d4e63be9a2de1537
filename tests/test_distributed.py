"""Sweeps under torchrun, on the CPU: a world of two processes with the gloo backend and a
fake explorer that saves into one results store. Sharding by cost, the merge on rank 0, a
rank that fails (an error, or a process that dies), and the run after it measuring only
what is missing."""
import json
import multiprocessing
import os

import pytest

torch = pytest.importorskip("torch")

from cudnn_explorer.core.capture import Capture, ModelSpec, UniqueConv  # noqa: E402
from cudnn_explorer.core.errors import ResourceError, UserError  # noqa: E402
from cudnn_explorer.core.options import ExploreOptions  # noqa: E402
from cudnn_explorer.core.problem import ConvProblem  # noqa: E402
from cudnn_explorer.model import distributed  # noqa: E402
from fakes import ENV, fwd_result  # noqa: E402

OPTS = ExploreOptions.create(directions="fwd", budget_ms=5)


def capture(n=5):
    problems = [UniqueConv(ConvProblem.create(f"{8 * (k + 1)},16,32,32", out_channels=16,
                                              kernel=3), {"fwd": 1}, [f"conv{k}"])
                for k in range(n)]
    return Capture(model=ModelSpec(name="fake", input_shape=[16, 32, 32], batch=8),
                   problems=problems, conv_calls=n)


def test_world_from_env():
    assert distributed.world_from_env({}) is None
    assert distributed.world_from_env({"WORLD_SIZE": "1", "RANK": "0"}) is None
    w = distributed.world_from_env({"WORLD_SIZE": "4", "RANK": "5", "LOCAL_RANK": "1"})
    assert w == distributed.World(rank=5, local_rank=1, size=4)
    with pytest.raises(UserError, match="RANK, LOCAL_RANK and WORLD_SIZE"):
        distributed.world_from_env({"WORLD_SIZE": "2"})


def test_shards_cover_every_problem_once_balanced_by_cost():
    cap = capture(7)
    shares = distributed.shard(cap.problems, 3)
    assert sorted(i for s in shares for i in s) == list(range(7))
    cost = [sum(distributed.estimated_cost(cap.problems[i]) for i in s) for s in shares]
    # longest first onto the least loaded: no share exceeds the ideal by more than the
    # largest single problem
    biggest = max(distributed.estimated_cost(u) for u in cap.problems)
    assert max(cost) - sum(cost) / 3 <= biggest
    assert shares == distributed.shard(cap.problems, 3)  # deterministic
    # the costliest problem (largest batch) goes first, to rank 0
    assert 6 in shares[0]


def _rank(rank, init_file, store_path, mode, out_dir):
    """One rank: mode "ok", "error" (rank 1 raises on its last problem), "die" (rank 1
    exits before the barrier) or "samegpu" (both ranks name one device)."""
    world = distributed.World(rank, rank, 2)
    distributed.init(world, 60, init_method=f"file://{init_file}")
    try:
        _rank_job(world, rank, store_path, mode, out_dir)
    finally:
        distributed.finish()


def _rank_job(world, rank, store_path, mode, out_dir):
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.store.db import Store

    if mode == "samegpu":  # both ranks say they run on one device
        try:
            distributed.check_devices(world, "NVIDIA H200 GPU-1234 on host")
            out = {"refused": ""}
        except UserError as e:
            out = {"refused": str(e)}
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(out, f)
        return
    distributed.check_devices(world, f"GPU-{rank} on host")
    cap = capture()
    store = Store(store_path)
    measured = []

    def measure(share):
        for i in share:
            u = cap.problems[i]
            one = ExploreOptions.create(directions="fwd", budget_ms=5)
            if store.lookup(u.problem, ENV, one) is not None:
                continue  # stored by an earlier run: not measured twice
            if rank == 1 and i == share[-1]:
                if mode == "error":
                    raise ResourceError("out of GPU memory (fake)")
                if mode == "die":
                    os._exit(7)
            exp = Exploration(u.problem, ENV, [fwd_result()], tool_version="t", created="c")
            store.save(u.problem, ENV, one, exp.measurement, exp.directions[0])
            measured.append(i)

    share = distributed.shard(cap.problems, 2)[rank]
    error = distributed.run_share(world, share, measure)
    why = distributed.barrier(world, 10)
    out = {"rank": rank, "share": share, "measured": measured, "error": error, "why": why}
    if rank == 0:
        sw = distributed.merge(cap, OPTS, lambda p, o: store.lookup(p, ENV, o), ENV, "quick")
        out.update(missing=sw.missing, complete=sw.complete,
                   entries=[e.index for e in sw.entries])
    with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
        json.dump(out, f)
    store.close()


def _world(tmp_path, mode, run):
    ctx = multiprocessing.get_context("spawn")
    out = tmp_path / f"out_{run}"
    out.mkdir()
    init = tmp_path / f"init_{run}"
    procs = [ctx.Process(target=_rank, args=(r, str(init), str(tmp_path / "r.db"), mode,
                                             str(out))) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    codes = [p.exitcode for p in procs]
    res = {}
    for r in range(2):
        path = out / f"rank{r}.json"
        if path.exists():
            res[r] = json.loads(path.read_text())
    return codes, res


def test_two_ranks_share_merge_fail_and_resume(tmp_path):
    codes, res = _world(tmp_path, "error", 1)
    assert codes == [0, 0], codes
    shares = distributed.shard(capture().problems, 2)
    lost = shares[1][-1]
    assert "rank 1: ResourceError: out of GPU memory (fake)" == res[1]["error"]
    assert res[0]["missing"] == [lost] and not res[0]["complete"]
    assert sorted(res[0]["measured"] + res[1]["measured"]) == sorted(
        i for i in range(5) if i != lost)
    # the same run again measures only the problem that is missing
    codes, res = _world(tmp_path, "ok", 2)
    assert codes == [0, 0] and res[0]["complete"] and res[0]["missing"] == []
    assert res[0]["measured"] + res[1]["measured"] == [lost]


def test_ranks_on_one_gpu_are_refused_on_every_rank(tmp_path):
    codes, res = _world(tmp_path, "samegpu", 1)
    assert codes == [0, 0]
    for r in (0, 1):
        assert "ranks 0 and 1 would both run on NVIDIA H200 GPU-1234 on host" in \
            res[r]["refused"] and "time each other's kernels" in res[r]["refused"]


def test_a_rank_that_dies_is_named_and_its_problems_missing(tmp_path):
    codes, res = _world(tmp_path, "die", 1)
    assert codes == [0, 7] and 1 not in res
    assert "1" in res[0]["why"]  # gloo's monitored barrier names the rank
    lost = set(distributed.shard(capture().problems, 2)[1])
    assert set(res[0]["missing"]) <= lost and res[0]["missing"]


@pytest.mark.ext
def test_consistency_report_names_where_identical_gpus_differ(tmp_path, monkeypatch):
    import dataclasses

    from fakes import FakeBench
    from test_model_sweep import OPTS as SWEEP_OPTS, small_capture
    from cudnn_explorer.core.model_sweep import ModelSweep
    from cudnn_explorer.model.explore_problems import sweep
    from cudnn_explorer.report.model import render_consistency

    sw = sweep(small_capture(), SWEEP_OPTS, bench=FakeBench(tmp_path, monkeypatch))
    text = render_consistency([sw, sw])
    assert "agrees on every rank for 5 of 5 problem-directions" in text
    # rank 1 picked another plan for problem 2's forward direction
    other = ModelSweep.from_json(sw.to_json())
    e = other.entry(1)
    d = e.exploration.direction("fwd")
    pick = d.pytorch_pick("benchmark", api=None)
    alt = next(c for c in d.engines.configs if c.tag != pick.engine_tag and c.time)
    d.pytorch[d.pytorch.index(pick)] = dataclasses.replace(pick, engine_tag=alt.tag,
                                                           steady=None)
    text = render_consistency([sw, other])
    assert "agrees on every rank for 4 of 5" in text and "#2" in text
    t0, t1 = d.pick_timing(pick).median_ms, alt.time
    assert f"{100 * (max(t0, t1) / min(t0, t1) - 1):.1f}%" in text
    # a row per pick, with its whole tag and the ranks that made it
    from cudnn_explorer.report.format import fmt_ms, short_tag

    for tag, rank in ((pick.engine_tag, "r0"), (alt.tag, "r1")):
        assert any(f" {short_tag(tag, 44)} " in ln and f" {rank} " in ln
                   for ln in text.splitlines()), text
    # each plan timed on every rank: the alternative from its engine config on both, rank
    # 0's pick (no engine config of its tag) from its own child's re-timing
    assert any(f" {short_tag(alt.tag, 44)} " in ln
               and f"{fmt_ms(alt.time)} / {fmt_ms(alt.time)}" in ln
               for ln in text.splitlines()), text
    assert any(f" {short_tag(pick.engine_tag, 44)} " in ln
               and ln.split("  r0  ")[-1].strip().startswith(f"{fmt_ms(t0)} / ")
               for ln in text.splitlines()), text
    # the best engine configs agree: no table of them
    assert "best engine configs found differ" not in text
    # on rank 1 problem 1's best forward config measured 5% slower than the runner-up
    third = ModelSweep.from_json(sw.to_json())
    d3 = third.entry(0).exploration.direction("fwd")
    best, runner = d3.engines.ranked()[:2]
    slower = dataclasses.replace(best.timing, median_ms=runner.time * 1.05)
    d3.engines.configs[d3.engines.configs.index(best)] = dataclasses.replace(
        best, timing=slower)
    text = render_consistency([sw, third])
    assert "the best engine config for 4 of 5" in text, text
    at = text.index("best engine configs found differ")
    rows = text[at:].splitlines()
    spread = max(runner.time / best.time - 1, 0.05)
    assert any(f" {short_tag(best.tag, 44)} " in ln and " r0 " in ln
               and f"{fmt_ms(best.time)} / {fmt_ms(runner.time * 1.05)}" in ln
               and f"{100 * spread:.1f}%" in ln for ln in rows), text
    assert any(f" {short_tag(runner.tag, 44)} " in ln and " r1 " in ln
               and f"{fmt_ms(runner.time)} / {fmt_ms(runner.time)}" in ln
               for ln in rows), text
