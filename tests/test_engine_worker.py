"""The engine-config watchdog, without a GPU: a fake worker whose configs hang or crash."""
import textwrap
import time

import pytest

from cudnn_explorer.measure import engine_worker
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.errors import ChildError
from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.core.search_preferences import SearchPreferences
from fakes import WORKER_HEAD, WORKER_TAIL

# A worker with a fake EngineSearch: engine 0 has no knobs; engine 1 has knob 2 (TILE_SIZE)
# in 0..3, where 3 is invalid and 1 never finishes; engine 2 kills its process.
FAKE_WORKER = WORKER_HEAD + textwrap.dedent("""\
    class Search:
        def engine_count(self):
            return 3
        def engine_info(self, e):
            knobs = [NS(type=2, min_value=0, max_value=3, stride=1)] if e == 1 else []
            return NS(engine=e, status="OK", knobs=knobs)
        def heuristics(self, mode):
            return ["eng1_k2=2"] if mode == "A" else []
        def build(self, e, knobs):
            k = dict(knobs)
            if e == 2:
                os.abort()
            ok = k.get(2) != 3
            name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
            return NS(status="built" if ok else "config rejected",
                      message="" if ok else "bad", name=name, numeric_notes=[],
                      behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                      plan_index=0, knobs=k)
        def measure(self, built, timed, opt):
            if built.knobs.get(2) == 1:
                time.sleep(600)
            built.status = "OK"
            return built
    """) + WORKER_TAIL


@pytest.fixture
def fake_worker(tmp_path, monkeypatch):
    (tmp_path / "fake_engine_worker.py").write_text(FAKE_WORKER)
    (tmp_path / "fake_broken_worker.py").write_text("raise RuntimeError('no GPU here')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    return tmp_path


def test_hung_and_crashed_configs_are_recorded_and_the_rest_explored(fake_worker):
    from fakes import exploration, timing

    said = []
    legacy = exploration().directions[0].find[0]
    legacy.timing, legacy.kernels = timing(0.2), ["some_kernel"]
    sp = engine_worker.explore_isolated(
        ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
        ExploreOptions.create(engine_config_timeout_s=1.0),
        SearchPreferences(legacy_rows=[legacy]), progress=said.append,
        worker=engine_worker.EngineWorker("fake_engine_worker"))
    by_tag = {c.tag: c for c in sp.configs}
    assert by_tag["ConvFwd_eng0"].status == "OK"
    assert by_tag["ConvFwd_eng1_k2=2"].status == "OK"
    assert by_tag["ConvFwd_eng1_k2=2"].heuristic_ranks == {"A": 1}
    assert by_tag["ConvFwd_eng1_k2=0"].status == by_tag["ConvFwd_eng1"].status == "OK"
    hung = by_tag["ConvFwd_eng1_k2=1"]
    assert hung.status == "hung"
    assert "no result within 1 s, stuck running, timing and checking it" in hung.message
    crashed = by_tag["ConvFwd_eng2"]
    assert crashed.status == "crashed"
    assert "died building its plan (run-time compilation included) (killed by SIGABRT)" \
        in crashed.message
    assert "ConvFwd_eng1_k2=3" not in by_tag  # rejected: counted, not listed
    e1 = sp.engines[1]
    assert (e1["tried"], e1["rejected"], e1["configs"], e1["failed"]) == (5, 1, 4, 1)
    for e in sp.engines:
        assert e["tried"] == e["rejected"] + e["configs"]
    assert sp.time_budget_s == 120.0
    # the fake's kernels are not read: no map from legacy rows (rather than empty ones)
    assert sp.legacy_map == {}
    from cudnn_explorer.core.records import DirectionResult
    from cudnn_explorer.report import engines

    d = DirectionResult(direction="fwd", math_type="DEFAULT_MATH", find=[], heuristics=[],
                        workspace=[], workspace_needed_bytes=0, workspace_given_bytes=0,
                        engines=sp)
    line = engines.summary_lines(d)[0]
    assert "2 hung or crashed the worker process" in line
    assert any("restarting the worker" in m for m in said)
    assert any("ConvFwd_eng1_k2=2" in m for m in said)  # the worker's progress comes through


def test_after_a_lost_worker_a_spare_is_kept_ahead_and_ended_with_it(tmp_path, monkeypatch):
    """Note [spare worker]: the fake's hung config and crashing engine lose two workers;
    from the first loss on a spare is kept ready (four processes in all, not three), and
    close() ends them all."""
    (tmp_path / "counted_worker.py").write_text(FAKE_WORKER.replace(
        WORKER_HEAD, WORKER_HEAD + 'open(os.environ["STARTS"], "a").write(f"{os.getpid()} ")\n',
        1))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("STARTS", str(tmp_path / "starts"))
    w = engine_worker.EngineWorker("counted_worker")
    sp = engine_worker.explore_isolated(
        ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
        ExploreOptions.create(engine_config_timeout_s=1.0), worker=w)
    assert sorted(c.status for c in sp.configs if c.status != "OK") == ["crashed", "hung"]
    # four processes: the first worker; at the first loss a spare, which replaced it at
    # once, and another spare; that one replaced the second loss, and one more is ready
    # (without spares: three, each replacement started when it was needed)
    assert w.proc is not None and w._spare is not None
    serving, spare = w.proc, w._spare[0]
    deadline = time.time() + 30
    while len((tmp_path / "starts").read_text().split()) < 4 and time.time() < deadline:
        time.sleep(0.05)
    pids = {int(p) for p in (tmp_path / "starts").read_text().split()}
    assert len(pids) == 4 and {serving.pid, spare.pid} < pids
    w.close()
    assert serving.poll() is not None and spare.poll() is not None
    assert w.proc is None and w._spare is None


def test_a_worker_that_fails_outside_any_config_is_one_clear_error(fake_worker):
    with pytest.raises(ChildError, match=r"engine worker for fwd failed \(exit code 1\): "
                                         r"RuntimeError: no GPU here"):
        engine_worker.explore_isolated(ConvProblem.create("1,8,8,8"), "fwd",
                                       ExploreOptions.create(),
                                       worker=engine_worker.EngineWorker(
                                           "fake_broken_worker"))


# A fake EngineSearch of one engine whose one config always works.
ONE_CONFIG_SEARCH = textwrap.dedent("""\
    class Search:
        def engine_count(self):
            return 1
        def engine_info(self, e):
            return NS(engine=e, status="OK", knobs=[])
        def heuristics(self, mode):
            return []
        def build(self, e, knobs):
            return NS(status="built", message="", name="eng0", numeric_notes=[],
                      behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                      plan_index=0, knobs={})
        def measure(self, built, timed, opt):
            built.status = "OK"
            return built
    """)

# A worker whose one config always works; every start appends its pid to STARTS.
STEADY_WORKER = WORKER_HEAD + textwrap.dedent("""\
    with open(os.environ["STARTS"], "a") as f:
        f.write(f"{os.getpid()} ")

    """) + ONE_CONFIG_SEARCH + WORKER_TAIL


@pytest.fixture
def steady_worker(tmp_path, monkeypatch):
    (tmp_path / "steady_worker.py").write_text(STEADY_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("STARTS", str(tmp_path / "starts"))
    return lambda: (tmp_path / "starts").read_text().split()


def test_one_worker_serves_every_direction_until_closed(steady_worker):
    p = ConvProblem.create("1,8,8,8", out_channels=8)
    w = engine_worker.EngineWorker("steady_worker")
    for d in ("fwd", "bwd-data", "bwd-filter", "fwd"):
        sp = engine_worker.explore_isolated(p, d, ExploreOptions.create(), worker=w)
        assert [c.status for c in sp.configs] == ["OK"]
    assert len(steady_worker()) == 1  # started once, for four directions
    proc = w.proc
    w.close()
    assert proc.poll() == 0 and w.proc is None  # ended at the end of its stdin


def test_a_worker_that_died_while_idle_is_replaced(steady_worker):
    import os
    import signal

    p = ConvProblem.create("1,8,8,8", out_channels=8)
    with engine_worker.EngineWorker("steady_worker") as w:
        engine_worker.explore_isolated(p, "fwd", ExploreOptions.create(), worker=w)
        os.kill(w.proc.pid, signal.SIGKILL)
        w.proc.wait()
        sp = engine_worker.explore_isolated(p, "fwd", ExploreOptions.create(), worker=w)
        assert [c.status for c in sp.configs] == ["OK"]
    assert len(steady_worker()) == 2


@pytest.mark.parametrize("keep", [False, True])
def test_a_bench_keeps_its_worker_only_when_asked(steady_worker, monkeypatch, keep):
    from cudnn_explorer.measure.pipeline import GpuBench

    monkeypatch.setattr(engine_worker, "WORKER_MODULE", "steady_worker")
    p = ConvProblem.create("1,8,8,8", out_channels=8)
    bench = GpuBench(0, keep_worker=keep)
    for d in ("fwd", "bwd-data"):
        bench.engines(p, d, ExploreOptions.create(), [], [], lambda m: None)
        assert (bench.worker.proc is not None) == keep
    bench.close()
    assert bench.worker.proc is None
    assert len(steady_worker()) == (1 if keep else 2)
    engine_worker.explore_isolated(p, "fwd", ExploreOptions.create())  # a worker of its own
    assert len(steady_worker()) == (2 if keep else 3)


@pytest.mark.parametrize("free_gib,kept", [(80, True), (2, False)])
def test_a_bench_keeps_its_worker_while_the_gpu_has_room(steady_worker, monkeypatch,
                                                          free_gib, kept):
    """Note [one engine worker]: by default the worker is started ahead (before any job)
    and serves the next direction too, unless the GPU is short of memory after one."""
    import torch

    from cudnn_explorer.measure import pipeline

    monkeypatch.setattr(engine_worker, "WORKER_MODULE", "steady_worker")
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda d=None: (free_gib << 30, 96 << 30))
    p = ConvProblem.create("1,8,8,8", out_channels=8)
    bench = pipeline.GpuBench(0)
    bench.prestart(p, ExploreOptions.create(pytorch=False))
    assert bench.worker.proc is not None and bench.worker.proc.poll() is None
    for d in ("fwd", "bwd-data"):
        bench.engines(p, d, ExploreOptions.create(), [], [], lambda m: None)
        assert (bench.worker.proc is not None) == kept
    bench.close()
    assert len(steady_worker()) == (1 if kept else 2)


def test_a_worker_whose_cuda_context_broke_is_replaced_after_its_job(steady_worker,
                                                                       tmp_path):
    # the steady worker, with every job ending as if a config had left a sticky CUDA error
    src = (tmp_path / "steady_worker.py").read_text()
    assert "\ndef setup(" in src
    (tmp_path / "broken_context_worker.py").write_text(src.replace(
        "\ndef setup(", "\nengine_serve._release = lambda: False\n\n\ndef setup(", 1))
    p = ConvProblem.create("1,8,8,8", out_channels=8)
    with engine_worker.EngineWorker("broken_context_worker") as w:
        for d in ("fwd", "bwd-data", "bwd-filter"):
            sp = engine_worker.explore_isolated(p, d, ExploreOptions.create(), worker=w)
            assert [c.status for c in sp.configs] == ["OK"]
            assert w.proc is None  # retired at once
    assert len(steady_worker()) == 3


# A staged search in a real worker process: engine 0's knob 2 in 0..4 picks a time (ms);
# k2=1 hangs when it is timed in round 2 (at round 2's budget).
STAGED_WORKER = WORKER_HEAD + textwrap.dedent("""\
    from cudnn_explorer.core.staging import ROUNDS
    ROUND2_BUDGET_MS = ROUNDS[1].budget_ms
    TIMES = [1.5, 1.0, 1.05, 1.2, 3.0]
    class Search:
        def engine_count(self):
            return 1
        def engine_info(self, e):
            return NS(engine=e, status="OK", knobs=[NS(type=2, min_value=0, max_value=4,
                                                       stride=1)])
        def heuristics(self, mode):
            return ["eng0_k2=0"] if mode == "A" else []
        def build(self, e, knobs):
            k = dict(knobs)
            name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
            return NS(status="built" if 2 in k else "config rejected", message="", name=name,
                      numeric_notes=[], behavior_notes=[], workspace_bytes=0, build_ms=0.5,
                      timed=False, plan_index=0, knobs=k, timing=None)
        def measure(self, built, timed, opt):
            k = built.knobs[2]
            if k == 1 and opt.budget_ms == ROUND2_BUDGET_MS:
                time.sleep(600)
            t = TIMES[k]
            native = NS(per_launch_ms=[t] * 5, launches_per_sample=10, method="graph",
                        warmup_launches=12, note="", eager_per_call_ms=[],
                        eager_calls_per_sample=0, kernels=[], kernels_read=False)
            return NS(**{**vars(built), "status": "OK", "timed": timed, "timing": native})
    """) + WORKER_TAIL


def test_a_config_that_hangs_in_a_later_round_is_recorded_and_the_rest_staged(tmp_path,
                                                                              monkeypatch):
    (tmp_path / "staged_engine_worker.py").write_text(STAGED_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    sp = engine_worker.explore_isolated(
        ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
        ExploreOptions.create(engine_config_timeout_s=1.0, budget_ms=25.0, staged=True),
        worker=engine_worker.EngineWorker("staged_engine_worker"))
    by_tag = {c.tag: c for c in sp.configs}
    assert len(sp.configs) == len(by_tag) == 5  # each config once
    assert by_tag["ConvFwd_eng0_k2=1"].status == "hung"
    assert "no result within 1 s" in by_tag["ConvFwd_eng0_k2=1"].message
    assert by_tag["ConvFwd_eng0_k2=4"].left_round == 1
    assert by_tag["ConvFwd_eng0_k2=3"].left_round == 2
    assert sp.best().tag == "ConvFwd_eng0_k2=2"  # the fastest that did not hang
    assert [r["round"] for r in sp.rounds] == [1, 2, "final"]


@pytest.mark.parametrize("staged", [True, False])
def test_a_config_whose_launch_never_ends_is_killed_at_round_1s_limit(tmp_path, monkeypatch,
                                                                      staged):
    """Note [hung launches]: a round-1 candidate whose launch never ends is killed at its
    launches' limit, not after the whole --engine-config-timeout; in a full timing (the
    thorough profile) it keeps the whole timeout."""
    from cudnn_explorer.core import staging

    src = STAGED_WORKER.replace("if k == 1 and opt.budget_ms == ROUND2_BUDGET_MS:", "if k == 1:")
    assert src != STAGED_WORKER
    (tmp_path / "launch_hang_worker.py").write_text(src)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    # the parent's limit: 10 launches of the cutoff, under a floor made 0.5 s here
    monkeypatch.setattr(staging, "ROUND1_LIMIT_LAUNCHES", 10)
    monkeypatch.setattr(staging, "RUN_LIMIT_FLOOR_S", 0.5)
    timeout = 60.0 if staged else 2.0
    t0 = time.perf_counter()
    sp = engine_worker.explore_isolated(  # k2=0 (1.5 ms) is timed first: cutoff 4.5 ms
        ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
        ExploreOptions.create(engine_config_timeout_s=timeout, budget_ms=25.0, staged=staged),
        worker=engine_worker.EngineWorker("launch_hang_worker"))
    hung = {c.tag: c for c in sp.configs}["ConvFwd_eng0_k2=1"]
    assert hung.status == "hung"
    if staged:
        assert time.perf_counter() - t0 < 30  # not the 60 s of the config timeout
        assert hung.message.startswith(
            "no result within 0.5 s of its plan's launches (round 1's limit: 10 launches of "
            "4.5 ms, 3x the fastest config so far, at least 0.5 s), stuck running, timing "
            "and checking it")
    else:
        assert hung.message.startswith("no result within 2 s, stuck running, timing and "
                                       "checking it")
    assert sp.best().tag == "ConvFwd_eng0_k2=2"
    assert {c.status for c in sp.configs if c.tag != hung.tag} == {"OK"}


def test_the_launches_limit_needs_a_cutoff_and_grows_with_it():
    """Only a built round-1 candidate (a cutoff) gets a launches' limit; a slower
    direction's cutoff gives its launches more time (2,000 launches of 30 ms: 60 s)."""
    for ev in ({"stage": "running", "cutoff_ms": 0.0}, {"stage": "running"},
               {"stage": "built", "cutoff_ms": 1.0}):
        assert engine_worker._run_limit(ev) is None, ev
    assert engine_worker._run_limit({"stage": "running", "cutoff_ms": 1.0})[0] == 3.0  # the floor: 2,000 launches of 1 ms are 2 s
    secs, text = engine_worker._run_limit({"stage": "running", "cutoff_ms": 30.0})
    assert secs == 60.0 and text.startswith("60 s of its plan's launches (round 1's limit: "
                                            "2,000 launches")


def test_only_the_preferred_configs_reach_the_worker_when_asked(fake_worker):
    """explore_isolated with SearchPreferences(only_preferred=True) through a real worker
    process: the given plans are timed, and neither the heuristics' config nor the
    sampling's."""
    opts = ExploreOptions.create(engine_sampling=False)
    with engine_worker.EngineWorker("fake_engine_worker") as w:
        sp = engine_worker.explore_isolated(
            ConvProblem.create("1,8,8,8", out_channels=8), "fwd", opts,
            SearchPreferences(preferred_tags=["ConvFwd_eng0", "ConvFwd_eng1_k2=0"],
                              only_preferred=True), worker=w)
        assert sorted(c.tag for c in sp.configs) == ["ConvFwd_eng0", "ConvFwd_eng1_k2=0"]
        assert all(c.status == "OK" for c in sp.configs)
        sp = engine_worker.explore_isolated(  # the default: the heuristics' one too
            ConvProblem.create("1,8,8,8", out_channels=8), "fwd", opts,
            SearchPreferences(preferred_tags=["ConvFwd_eng0"]), worker=w)
        assert sorted(c.tag for c in sp.configs) == ["ConvFwd_eng0", "ConvFwd_eng1_k2=2"]


# A worker whose first job's tensors do not fit in the GPU's memory; it serves the next.
SHORT_WORKER = WORKER_HEAD + "from cudnn_explorer.core.errors import ResourceError\n\n" + \
    ONE_CONFIG_SEARCH + textwrap.dedent("""\

    JOBS = []

    def setup(problem, direction, device, seed, check):
        JOBS.append(direction)
        if len(JOBS) == 1:
            raise ResourceError("out of GPU memory for the fwd tensors of a problem: needs "
                                "about 411 MiB, 300 MiB free on GPU 0")
        return None, {"x": Out(), "w": Out(), "y": Out()}, None

    sys.exit(engine_serve.main(sys.argv[1:], setup=setup, search=Search()))
    """)


def test_a_job_out_of_memory_is_said_and_the_worker_serves_on(tmp_path, monkeypatch):
    from cudnn_explorer.core.errors import ResourceError

    (tmp_path / "short_worker.py").write_text(SHORT_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    p, opts = ConvProblem.create("1,8,8,8", out_channels=8), ExploreOptions.create()
    with engine_worker.EngineWorker("short_worker") as w:
        with pytest.raises(ResourceError, match=r"^engine worker for fwd: out of GPU memory "
                                                r"for the fwd tensors of a problem: needs "
                                                r"about 411 MiB, 300 MiB free on GPU 0$"):
            engine_worker.explore_isolated(p, "fwd", opts, worker=w)
        pid = w.proc.pid
        sp = engine_worker.explore_isolated(p, "bwd-data", opts, worker=w)
        assert w.proc.pid == pid  # the same process served the next job
    assert [c.tag for c in sp.configs] == ["ConvBwdData_eng0"]


def test_a_known_hang_gets_the_shorter_limit_in_a_full_search(tmp_path, monkeypatch):
    """Note [known hangs]: the thorough profile still tries a config known to hang, but
    the watchdog waits hangs.KNOWN_HANG_LIMIT_S for its launches, not the whole
    --engine-config-timeout, and the record says why; the other configs run as before."""
    from cudnn_explorer.core import hangs

    src = STAGED_WORKER.replace("if k == 1 and opt.budget_ms == ROUND2_BUDGET_MS:", "if k == 1:")
    src = src.replace("search=Search())", "search=Search(), hangs=lambda d, dev: (\n"
                      "    lambda e, ch: 'known to hang (test)' if dict(ch).get(2) == 1 "
                      "else None))")
    assert "known to hang (test)" in src and "if k == 1:" in src
    (tmp_path / "known_hang_worker.py").write_text(src)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setattr(hangs, "KNOWN_HANG_LIMIT_S", 0.5)
    t0 = time.perf_counter()
    sp = engine_worker.explore_isolated(
        ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
        ExploreOptions.create(engine_config_timeout_s=60.0, budget_ms=25.0, staged=False),
        worker=engine_worker.EngineWorker("known_hang_worker"))
    assert time.perf_counter() - t0 < 30  # not the 60 s of the config timeout
    hung = {c.tag: c for c in sp.configs}["ConvFwd_eng0_k2=1"]
    assert hung.status == "hung"
    assert hung.message.startswith("no result within 0.5 s of its plan's launches (known to "
                                   "hang (test)), stuck running"), hung.message
    assert {c.status for c in sp.configs if c.tag != hung.tag} == {"OK"}


def test_the_shorter_of_two_launch_limits_applies():
    from cudnn_explorer.core import hangs

    both = engine_worker._run_limit({"stage": "running", "cutoff_ms": 30.0, "known_hang": "k"})
    assert both[0] == hangs.KNOWN_HANG_LIMIT_S and "(k)" in both[1]  # 10 s < 60 s
    assert engine_worker._run_limit({"stage": "running", "cutoff_ms": 1.0,
                                     "known_hang": "k"})[0] == 3.0  # round 1's floor
    assert engine_worker._run_limit({"stage": "built", "known_hang": "k"}) is None


def test_a_worker_out_of_memory_stops_the_search_and_keeps_what_it_tried(tmp_path,
                                                                         monkeypatch):
    """Note [a worker short of memory]: a worker that dies out of GPU memory inside a
    config is not replaced (on the H100 with 2 GiB free, 21 workers were lost in turn);
    the error says so in its words, and its ``partial`` holds the configs tried before,
    and the one it died in, with the engines as the worker listed them."""
    from cudnn_explorer.core.errors import ResourceError
    from fakes import OOM_LINE, SHORT_OF_MEMORY_WORKER

    (tmp_path / "short_of_memory_worker.py").write_text(SHORT_OF_MEMORY_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("STARTS", str(tmp_path / "starts"))
    p = ConvProblem.create("1,8,8,8", out_channels=8)
    with engine_worker.EngineWorker("short_of_memory_worker") as w:
        with pytest.raises(ResourceError) as e:
            engine_worker.explore_isolated(p, "fwd", ExploreOptions.create(staged=False),
                                           worker=w)
        assert str(e.value) == (
            "engine worker for fwd ran out of GPU memory in ConvFwd_eng2: the worker process "
            "died running, timing and checking it (exit code 1); " + OOM_LINE)
        assert len((tmp_path / "starts").read_text().split()) == 1  # none started again
        sp = e.value.partial
        assert [(c.tag, c.status) for c in sp.configs] == [
            ("ConvFwd_eng0", "OK"), ("ConvFwd_eng1", "OK"), ("ConvFwd_eng2", "crashed")]
        assert [c.time for c in sp.configs[:2]] == pytest.approx([0.1, 0.2])
        assert sp.engine_count == 3 and sp.best().tag == "ConvFwd_eng0"
        assert [(x["tried"], x["configs"], x["failed"]) for x in sp.engines] == [
            (1, 1, 0), (1, 1, 0), (1, 1, 1)]
        # the next direction gets a worker of its own, which has the memory it needs
        sp = engine_worker.explore_isolated(p, "bwd-data", ExploreOptions.create(), worker=w)
        assert [c.status for c in sp.configs] == ["OK"] * 3


def test_a_worker_that_cannot_start_for_memory_is_a_resource_error(tmp_path, monkeypatch):
    """A worker whose CUDA context does not fit dies before its first config: that is the
    GPU's memory (ResourceError, exit code 3), and nothing was tried (no ``partial``)."""
    from cudnn_explorer.core.errors import ResourceError

    (tmp_path / "no_context_worker.py").write_text(
        "raise RuntimeError('CUDA error: out of memory')\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    with pytest.raises(ResourceError, match=r"^engine worker for fwd failed \(exit code 1\): "
                                            r"RuntimeError: CUDA error: out of memory$") as e:
        engine_worker.explore_isolated(ConvProblem.create("1,8,8,8"), "fwd",
                                       ExploreOptions.create(),
                                       worker=engine_worker.EngineWorker("no_context_worker"))
    assert e.value.partial is None


def test_a_search_that_gives_up_keeps_the_configs_tried(fake_worker, monkeypatch):
    """After MAX_RESTARTS lost workers the search gives up (ChildError, as before), and
    its ``partial`` keeps what ran before (here no restart is allowed, and engine 1's
    k2=1 hangs after engine 0's config and three of engine 1's ran)."""
    monkeypatch.setattr(engine_worker, "MAX_RESTARTS", 0)
    with pytest.raises(ChildError, match=r"^engine worker for fwd: 1 configs hung or crashed "
                                         r"it; giving up") as e:
        engine_worker.explore_isolated(
            ConvProblem.create("1,8,8,8", out_channels=8), "fwd",
            ExploreOptions.create(engine_config_timeout_s=1.0, staged=False),
            worker=engine_worker.EngineWorker("fake_engine_worker"))
    sp = e.value.partial
    statuses = {c.tag: c.status for c in sp.configs}
    assert statuses.pop("ConvFwd_eng1_k2=1") == "hung"
    assert statuses == {t: "OK" for t in ("ConvFwd_eng0", "ConvFwd_eng1",
                                          "ConvFwd_eng1_k2=0", "ConvFwd_eng1_k2=2")}
    assert sp.engine_count == 3
