"""Note [engine search ahead] without a GPU: a fake worker that logs what it does, given a
held job (hold_isolated) that lists and builds before its go and times after it."""
import os
import textwrap
import time

import pytest

from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.core.problem import ConvProblem
from cudnn_explorer.core.search_preferences import SearchPreferences
from cudnn_explorer.measure import engine_worker

from test_engine_worker import WORKER_HEAD, WORKER_TAIL

# engine 0 has no knobs; engine 1 has knob 2 in 0..3 (3 invalid); heuristic mode A lists
# eng1_k2=2, then eng1_k2=0, and FALLBACK eng0. Every build, measure and setup is logged
# (LOG) with its process; HANG names a config whose build never ends.
AHEAD_WORKER = WORKER_HEAD + textwrap.dedent("""\
    def log(what):
        with open(os.environ["LOG"], "a") as f:
            f.write(f"{os.getpid()} {what}\\n")

    class Search:
        def engine_count(self):
            return 2
        def engine_info(self, e):
            knobs = [NS(type=2, min_value=0, max_value=3, stride=1)] if e == 1 else []
            return NS(engine=e, status="OK", knobs=knobs)
        def heuristics(self, mode):
            return ["eng1_k2=2", "eng1_k2=0"] if mode == "A" else ["eng0"]
        def build(self, e, knobs):
            k = dict(knobs)
            name = "eng%d" % e + "".join("_k%d=%d" % tuple(kv) for kv in sorted(knobs))
            log("build " + name)
            if name == os.environ.get("HANG"):
                time.sleep(600)
            ok = k.get(2) != 3
            return NS(status="built" if ok else "config rejected",
                      message="" if ok else "bad", name=name, numeric_notes=[],
                      behavior_notes=[], workspace_bytes=0, build_ms=0.5, timed=False,
                      plan_index=0, knobs=k)
        def measure(self, built, timed, opt):
            log("measure " + built.name)
            built.status = "OK"
            return built
    """) + WORKER_TAIL.replace("def setup(problem, direction, device, seed, check):",
                               "def setup(problem, direction, device, seed, check):\n"
                               "    log('setup')")

P = ConvProblem.create("1,8,8,8", out_channels=8)


@pytest.fixture
def ahead(tmp_path, monkeypatch):
    (tmp_path / "ahead_worker.py").write_text(AHEAD_WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("LOG", str(tmp_path / "log"))
    return tmp_path / "log"


def lines(log, wait_for=None, timeout=60.0):
    """The log's lines (pid dropped), after waiting until ``wait_for`` is among them."""
    deadline = time.time() + timeout
    while True:
        got = [ln.split(" ", 1)[1] for ln in log.read_text().splitlines()] \
            if log.exists() else []
        if wait_for is None or wait_for in got or time.time() > deadline:
            return got
        time.sleep(0.05)


def outcome(sp):
    return sorted((c.tag, c.status) for c in sp.configs)


def test_a_held_job_builds_before_its_go_and_times_after_it(ahead):
    """Before the go: the listed configs' plans are built, and nothing else runs (no
    tensors, no launch); after it, the search times them without building them again,
    and finds what a job handed over whole finds."""
    opts = ExploreOptions.create(engine_sampling=False)
    with engine_worker.EngineWorker("ahead_worker") as w:
        held = engine_worker.hold_isolated(P, "fwd", opts, worker=w)
        before = lines(ahead, "build eng1_k2=0")
        assert before == ["build eng0", "build eng1_k2=2", "build eng1_k2=0"]
        time.sleep(0.3)
        assert lines(ahead) == before  # it waits for its go
        sp = engine_worker.explore_isolated(P, "fwd", opts, worker=w, held=held)
        after = lines(ahead)[len(before):]
        assert after[0] == "setup" and not any(a.startswith("build") for a in after)
        assert sorted(after[1:]) == ["measure eng0", "measure eng1_k2=0", "measure eng1_k2=2"]
        served = w.proc
        os.remove(ahead)
        again = engine_worker.explore_isolated(P, "fwd", opts, worker=w)  # handed over whole
        assert w.proc is served  # the same process served both
    assert outcome(sp) == outcome(again) == [
        ("ConvFwd_eng0", "OK"), ("ConvFwd_eng1_k2=0", "OK"), ("ConvFwd_eng1_k2=2", "OK")]
    assert lines(ahead)[0] == "setup"  # a plain job sets up first, then builds and times


def test_a_cancelled_held_job_leaves_the_worker_serving(ahead):
    opts = ExploreOptions.create(engine_sampling=False)
    with engine_worker.EngineWorker("ahead_worker") as w:
        held = engine_worker.hold_isolated(P, "fwd", opts, worker=w)
        lines(ahead, "build eng1_k2=0")
        served = w.proc
        held.cancel()
        held.cancel()  # again: nothing more
        sp = engine_worker.explore_isolated(P, "bwd-data", opts, worker=w)
        assert w.proc is served and served.poll() is None
    assert [c.status for c in sp.configs] == ["OK"] * 3
    assert "setup" not in lines(ahead)[:3]  # the cancelled job never set up


def test_a_held_job_that_no_longer_matches_is_done_afresh(ahead):
    """PyTorch's picks changed between the hold and the go: the held job is dropped and
    the direction searched as handed over, PyTorch's pick first."""
    opts = ExploreOptions.create(engine_sampling=False)
    with engine_worker.EngineWorker("ahead_worker") as w:
        held = engine_worker.hold_isolated(P, "fwd", opts, worker=w)
        lines(ahead, "build eng1_k2=0")
        os.remove(ahead)
        sp = engine_worker.explore_isolated(
            P, "fwd", opts, SearchPreferences(preferred_tags=["ConvFwd_eng1_k2=1"]),
            worker=w, held=held)
    got = lines(ahead)
    assert got[0] == "setup" and got[1] == "build eng1_k2=1"
    assert ("ConvFwd_eng1_k2=1", "OK") in outcome(sp)


def test_a_plan_that_hangs_while_built_ahead_is_recorded_after_the_go(ahead, monkeypatch):
    monkeypatch.setenv("HANG", "eng1_k2=2")
    opts = ExploreOptions.create(engine_sampling=False, engine_config_timeout_s=1.0)
    with engine_worker.EngineWorker("ahead_worker") as w:
        held = engine_worker.hold_isolated(P, "fwd", opts, worker=w)
        lines(ahead, "build eng1_k2=2")
        sp = engine_worker.explore_isolated(P, "fwd", opts, worker=w, held=held)
    by_tag = dict(outcome(sp))
    assert by_tag["ConvFwd_eng1_k2=2"] == "hung"
    hung = next(c for c in sp.configs if c.tag == "ConvFwd_eng1_k2=2")
    assert "stuck building its plan" in hung.message
    assert by_tag["ConvFwd_eng0"] == by_tag["ConvFwd_eng1_k2=0"] == "OK"


def test_the_bench_holds_a_job_only_with_room_for_two_directions(monkeypatch):
    from cudnn_explorer.measure import pipeline

    opts = ExploreOptions.create()
    calls = []
    monkeypatch.setattr(pipeline, "hold_isolated", lambda *a, **k: calls.append(a) or "held")
    bench = pipeline.GpuBench(0)
    monkeypatch.setattr(bench, "free_bytes", lambda: pipeline.KEEP_WORKER_FREE_BYTES)
    assert bench.hold_engines(P, "fwd", opts, []) is None  # no room beside the margin
    monkeypatch.setattr(bench, "free_bytes", lambda: None)
    assert bench.hold_engines(P, "fwd", opts, []) is None  # the GPU cannot say
    monkeypatch.setattr(bench, "free_bytes", lambda: 64 << 30)
    assert bench.hold_engines(P, "fwd", opts.updated(engines=False), []) is None
    assert pipeline.GpuBench(0, keep_worker=False).hold_engines(P, "fwd", opts, []) is None
    assert bench.hold_engines(P, "fwd", opts, []) == "held" and len(calls) == 1


def test_a_held_job_whose_tensors_do_not_fit_is_done_again_afresh(tmp_path, monkeypatch):
    """Its tensors did not fit beside the legacy rows' (out of memory at its go): the
    direction's job runs again, handed over whole, once those are gone."""
    oom = textwrap.dedent("""\
        log('setup')
        if not os.path.exists(os.environ["LOG"] + ".oom"):
            open(os.environ["LOG"] + ".oom", "w").close()
            from cudnn_explorer.core.errors import ResourceError
            raise ResourceError("out of GPU memory for the fwd tensors")
        """)
    (tmp_path / "oom_worker.py").write_text(AHEAD_WORKER.replace(
        "    log('setup')\n", textwrap.indent(oom, "    "), 1))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    log = tmp_path / "log"
    monkeypatch.setenv("LOG", str(log))
    opts = ExploreOptions.create(engine_sampling=False)
    with engine_worker.EngineWorker("oom_worker") as w:
        held = engine_worker.hold_isolated(P, "fwd", opts, worker=w)
        lines(log, "build eng1_k2=0")
        sp = engine_worker.explore_isolated(P, "fwd", opts, worker=w, held=held)
    assert lines(log).count("setup") == 2
    assert outcome(sp) == [("ConvFwd_eng0", "OK"), ("ConvFwd_eng1_k2=0", "OK"),
                           ("ConvFwd_eng1_k2=2", "OK")]
