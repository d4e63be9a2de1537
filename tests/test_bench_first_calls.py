"""scripts/bench_first_calls.py without a GPU: PyTorch's children replaced by a stand-in
whose first call is slow unless its JIT cache (CUDA_CACHE_PATH) already holds what it
compiles, so each condition's caches are seen to be what the script says they are."""
import os
import textwrap

import pytest

from conftest import load_script
from cudnn_explorer.core.options import ExploreOptions
from cudnn_explorer.core.problem import ConvProblem

# A mode "compiles" one kernel per direction into its JIT cache: 100 ms on its first call
# where the cache lacks it, 10 ms where an earlier process put it there; the heuristics
# mode's kernel differs from the others', so only it pays again after a benchmark mode.
STAND_IN = textwrap.dedent("""\
    import json, os, sys
    spec = json.load(open(sys.argv[1]))
    log = spec["log_file"] or os.environ["CUDNN_LOGDEST_DBG"]
    open(log, "w").write("a log\\n")
    cache = os.environ["CUDA_CACHE_PATH"]
    kernel = "heuristic" if spec["mode"] == "heuristic" else "searched"
    directions = []
    for d in spec["directions"]:
        mark = os.path.join(cache, kernel + "-" + d)
        ms = 10.0 if os.path.exists(mark) else 100.0
        open(mark, "w").close()
        directions.append(dict(direction=d, first_call_ms=ms, first_peak_alloc_bytes=0,
                               first_reserved_growth_bytes=0, steady=None,
                               steady_peak_alloc_bytes=0, kernels=[], check=None))
    json.dump(dict(settings={}, directions=directions), open(sys.argv[2], "w"))
    """)


@pytest.fixture
def script(tmp_path, monkeypatch):
    (tmp_path / "standin_child.py").write_text(STAND_IN)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    return load_script("bench_first_calls")


def test_each_condition_gets_the_caches_it_names(script):
    from cudnn_explorer.measure.pytorch_picks import default_modes

    problem = ConvProblem.create("1,3,8,8")
    options = ExploreOptions.create(directions="fwd,bwd-data", child_timeout_s=60)
    before = os.environ.get("CUDA_CACHE_PATH")
    got = script.one_round(problem, options, child_module="standin_child")
    assert os.environ.get("CUDA_CACHE_PATH") == before  # as it was
    assert list(got) == list(script.CONDITIONS)
    bench, limit0, heur, det, legacy = (m.label for m in default_modes())
    first = {c: {m: v["fwd"] for m, v in modes.items()} for c, modes in got.items()}
    # in order: benchmark compiles, the later searching modes reuse it; heuristics its own
    assert first["in order"] == {bench: 100.0, limit0: 10.0, heur: 100.0, det: 10.0,
                                 legacy: 10.0}
    # again, in the same cache: nobody compiles
    assert set(first["again"].values()) == {10.0}
    # reversed, a new cache: the legacy mode (now first) compiles, benchmark reuses
    assert first["reversed"][legacy] == 100.0 and first["reversed"][bench] == 10.0
    # private: every mode compiles
    assert set(first["private"].values()) == {100.0}
    assert all(set(v) == {"fwd", "bwd-data"} for modes in got.values() for v in modes.values())


def test_medians_and_the_table(script):
    rounds = [{"in order": {"b": {"fwd": 100.0}, "h": {"fwd": 10.0}}},
              {"in order": {"b": {"fwd": 300.0}, "h": {"fwd": 30.0}}},
              {"in order": {"b": {"fwd": 200.0}, "h": {"fwd": 20.0}}}]
    med = script.medians(rounds)
    assert med == {"in order": {"b": {"fwd": 200.0}, "h": {"fwd": 20.0}}}
    text = script.table(med, ["b", "h"], ["fwd"], "b", "h")
    assert "200.0" in text and "20.0" in text
    line = next(x for x in text.splitlines() if x.startswith("b less h"))
    assert "180.0" in line and line.count("-") >= 3  # the conditions not run show "-"


def test_bad_input_is_one_line_and_exit_2(script, capsys):
    assert script.main(["--shape", "0,3,8,8"]) == 2
    assert script.main(["--repeats", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("bench_first_calls: ") and "--repeats 0" in err[1]
