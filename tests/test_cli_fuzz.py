"""A fuzz of the command line: hundreds of malformed invocations, each run in-process.

Every one must end with exactly one line on stderr, ``cudnn_explorer: error: ...``, exit
code 2 (the user's mistake) or 3 (the machine), no traceback, within a few seconds, and
without reaching the measuring layer: a malformed invocation is refused before anything
is measured. Malformed --load files must exit 2 naming the file; a well-typed edit of a
saved file may render (exit 0), but never crash.
"""
import contextlib
import copy
import dataclasses
import importlib
import io
import json
import random
import signal

import pytest

from cudnn_explorer import cli
from cudnn_explorer.cli import explore as explore_verb
from cudnn_explorer.jobs import lazy_measure
from cudnn_explorer.core.records import EngineConfig, EngineSpace, PyTorchPick
from fakes import retimed_exploration, timing

CASE_SECONDS = 10

# Every flag that takes a value, with values that are malformed for it.
_NUMBERS = ["", " ", "abc", "1.5.2", "nan", "inf", "-inf", "1e999", "0x10", "--", "１",
            "9" * 5000, str(2**64), str(10**30), "-1", "-0.5", "1,2", "3;4", "None", "True",
            "\u202e7"]
VALUE_FLAGS = {
    "--shape": ["", "abc", "1", "1,2", "1,2,3,4,5,6", "-1,3,8,8", "0,3,8,8", "1,0,8,8",
                "1,3,0,8", str(10**30) + ",3,8,8", f"{2**63},3,8,8", "1,3,8,8,", ",1,3,8,8",
                "1,,3,8", "1.0,3,8,8", "1,3,8,8x", "1e3,3,8,8", "1,3,１,8", "9" * 5000,
                "100000,3000,224,224", "1,2147483648,1,1", "1,3,2147483648,8"],
    "--out-channels": _NUMBERS + ["64,64", "0"],
    "--kernel": _NUMBERS + ["0", "3,3,3", "3,3,3,3", "1,0"],
    "--stride": _NUMBERS + ["0", "3,3,3", "1,0"],
    "--padding": _NUMBERS + ["3,3,3", "-1,0", str(2**40)],
    "--dilation": _NUMBERS + ["0", "5", "3,3,3"],
    "--groups": _NUMBERS + ["0", "3", "64", "7"],
    "--dtype": ["", "int8", "float8", "f32x", "torch.int", "1", "float32,float16"],
    "--tf32": ["", "maybe", "2", "on,off"],
    "--layout": ["", "chwn", "nhwc,nchw", "1", "ncdhw"],
    "--direction": ["", "up", "fwd,fwd", "fwd,,bwd-data", "all,fwd", "FWD;bwd", "1"],
    "--device": _NUMBERS + [str(2**31)],
    "--max-workspace": _NUMBERS + [str(2**31)],
    "--seed": _NUMBERS + [str(2**64), str(-2**63)],
    "--budget-ms": _NUMBERS + ["1e9"],
    "--benchmark-limit": _NUMBERS,
    "--child-timeout": _NUMBERS + ["0", "1e9"],
    "--engine-configs": _NUMBERS + ["0", "100000"],
    "--engine-config-timeout": _NUMBERS + ["0"],
    "--engine-budget-s": _NUMBERS + ["0"],
}
# _NUMBERS holds a few values valid for some flags; those are dropped for that flag.
_VALID = {("--padding", "1,2"), ("--stride", "1,2"), ("--kernel", "1,2"),
          ("--dilation", "1,2"), ("--padding", "0x10")}  # 0x10: the 2-D padding 0,10


def _bad_values():
    for flag, values in VALUE_FLAGS.items():
        for v in values:
            if (flag, v) in _VALID:
                continue
            base = [] if flag == "--shape" else ["--shape", "2,4,8,8", "--out-channels", "4"]
            yield base + [flag, v]
            if v and not v.startswith("-"):
                yield base + [f"{flag}={v}"]


def _conflicts():
    shape = ["--shape", "2,4,8,8"]
    for rule in explore_verb.CONFLICTS:
        flag = rule.flag
        for other in rule.others[:8]:
            args = [flag] if flag not in ("--load",) else [flag, "saved.json"]
            action = explore_verb.build_parser().flags[other]
            args += [other] if action.nargs == 0 else [other, "1"]
            if flag not in ("--load", "--info") and other not in explore_verb.PROBLEM_FLAGS:
                args = shape + args
            yield args
    yield shape + ["--json", "-", "--csv", "-"]
    yield shape + ["--json", "--csv"]
    yield shape + ["--engines", "--no-engines"]
    yield ["--frobnicate"]
    yield ["--sha", "1,3,8,8"]  # abbreviations are not taken
    yield ["1,3,8,8"]
    yield shape + ["--shape"]


def _unwritable(tmp_path):
    shape = ["--shape", "2,4,8,8"]
    d = tmp_path / "adir"
    d.mkdir(exist_ok=True)
    for flag in ("--json", "--csv"):
        yield shape + [flag, "/nonexistent/dir/out.json"]
        yield shape + [flag, str(d)]
        yield shape + [flag, str(tmp_path / "missing" / "x")]
        yield shape + [flag, "/proc/version"]


def rich_exploration():
    """A saved exploration with every kind of record: re-timed legacy rows, a PyTorch pick
    and engine configs."""
    e = retimed_exploration()
    d = e.directions[0]
    pick = PyTorchPick(label="benchmark=True", mode="benchmark", api="engine",
                       benchmark_limit=10, first_call_ms=812.5,
                       first_peak_alloc_bytes=3 << 20, first_reserved_growth_bytes=4 << 20,
                       steady=timing(0.21, eager=0.25), steady_peak_alloc_bytes=1 << 20,
                       kernels=["k1"], engine_tag="ConvFwd_eng0_k2=1",
                       plan_workspace_bytes=0, numeric_notes=["CUDNN_NUMERICAL_NOTE_TENSOR_CORE"],
                       heuristic_candidates=3, fallback_candidates=1,
                       candidates=[{"tag": "ConvFwd_eng0_k2=1", "workspace_bytes": 0}],
                       timed=[["ConvFwd_eng0_k2=1", 0.3]], max_error=1e-4, tolerance=1e-2,
                       output_finite=True)
    configs = [EngineConfig(tag="ConvFwd_eng0_k2=1", engine=0, knobs=[[2, 1]], status="OK",
                            workspace_bytes=0, build_ms=3.5, timing=timing(0.2, eager=0.24),
                            max_error=1e-4, tolerance=1e-2, output_finite=True,
                            heuristic_ranks={"A": 1}),
               EngineConfig(tag="ConvFwd_eng1_k2=0", engine=1, knobs=[[2, 0]],
                            status="build failed", message="no")]
    space = EngineSpace(engine_count=2, engines=[{"engine": 0, "status": "OK", "knobs": [],
                                                  "space": 2, "tried": 2, "rejected": 0,
                                                  "configs": 1, "untried": 0}],
                        configs=configs, max_per_engine=8, attempts_per_engine=128,
                        time_budget_s=120.0, wall_s=3.0)
    return dataclasses.replace(e, directions=[dataclasses.replace(d, pytorch=[pick],
                                                                  engines=space)])


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(node, list) and node:
        for i, v in enumerate(node):
            yield from _leaves(v, path + (i,))
    yield path


def _set(doc, path, value):
    doc = copy.deepcopy(doc)
    if not path:
        return value
    node = doc
    for p in path[:-1]:
        node = node[p]
    node[path[-1]] = value
    return doc


_REPLACEMENTS = [None, "x", -1, -0.5, float("nan"), float("inf"), [], {}, True, 10**400]


def _load_cases(tmp_path, count=420):
    """(file bytes, must_fail): mutated saved files, and files that are no result at all."""
    base = json.loads(rich_exploration().to_json())
    rng = random.Random(1234)
    cases = []
    paths = list(_leaves(base))
    for _ in range(count):
        path = rng.choice(paths)
        value = rng.choice(_REPLACEMENTS)
        doc = _set(base, path, value)
        text = json.dumps(doc, allow_nan=True)
        # A number below zero, NaN or infinite is never a valid result outside the
        # free-form summaries (engine ranges and counts, options) and the signed fields
        # (knob values, the reserve's growth); other edits may be.
        free = path[2:4] == ("engines", "engines") or {"options", "candidates", "knobs",
                                                         "first_reserved_growth_bytes"} & set(path)
        must_fail = (isinstance(value, (int, float)) and not isinstance(value, bool)
                     and (value != value or value == float("inf") or value > 2**64
                          or (value < 0 and not free)))
        cases.append((text.encode(), must_fail))
    whole = [b"", b"\x00\xff\xfe binary \x89PNG", b"[" * 100000 + b"]" * 100000,
             b'{"a":' * 50000 + b"1" + b"}" * 50000, b"[]", b"42", b'"text"', b"null",
             b"{", b'{"schema": "cudnn_explorer.exploration"}',
             json.dumps({**base, "directions": []}).encode(),
             json.dumps({k: v for k, v in base.items() if k != "directions"}).encode(),
             json.dumps({k: v for k, v in base.items() if k != "problem"}).encode(),
             json.dumps({**base, "schema_version": 0}).encode(),
             json.dumps({**base, "schema_version": "5"}).encode(),
             json.dumps({**base, "directions": base["directions"] * 2}).encode(),
             json.dumps(_set(base, ("problem", "input_shape"), [1, 3])).encode(),
             json.dumps(_set(base, ("problem", "input_shape"), [-1, 3, 8, 8])).encode(),
             json.dumps(_set(base, ("problem", "groups"), 0)).encode(),
             json.dumps(_set(base, ("directions", 0, "direction"), "sideways")).encode(),
             json.dumps(_set(base, ("directions", 0, "find", 0, "timing", "median_ms"),
                             -3.0)).encode(),
             json.dumps(_set(base, ("directions", 0, "find", 0, "timing"), "fast")).encode(),
             json.dumps(_set(base, ("directions", 0, "pytorch", 0, "steady"), [])).encode(),
             json.dumps(_set(base, ("directions", 0, "engines", "configs", 0, "knobs"),
                             "k")).encode(),
             "{\"schema\": \"é\"}".encode("latin-1")]
    cases += [(b, True) for b in whole]
    return cases


def run_main(argv):
    """(exit code, stdout, stderr) of cli.main(argv) in this process, with a time limit."""
    out, err = io.StringIO(), io.StringIO()

    def hung(signum, frame):
        raise TimeoutError(f"no answer in {CASE_SECONDS} s")

    old = signal.signal(signal.SIGALRM, hung)
    signal.alarm(CASE_SECONDS)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(list(argv))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return code, out.getvalue(), err.getvalue()


def _one_clean_line(code, err):
    lines = err.strip().splitlines()
    return (code in (2, 3) and len(lines) == 1 and lines[0].startswith("cudnn_explorer: error: ")
            and "Traceback" not in err and "internal error" not in err)


@pytest.fixture
def no_measuring(monkeypatch):
    """A malformed invocation must be refused before the measuring layer is reached."""
    def reached():
        raise AssertionError("reached the measuring layer")
    monkeypatch.setattr(lazy_measure, "measuring", reached)
    monkeypatch.delenv("CUDNN_EXPLORER_DEBUG", raising=False)


def test_cli_fuzz_malformed_invocations(tmp_path, no_measuring, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "saved.json").write_text(rich_exploration().to_json())
    cases = list(_bad_values()) + list(_conflicts()) + list(_unwritable(tmp_path))
    load = _load_cases(tmp_path)
    assert len(cases) + len(load) >= 600
    bad = []
    for argv in cases:
        code, _, err = run_main(argv)
        if not _one_clean_line(code, err):
            bad.append((argv, code, err.strip()[-300:]))
    for i, (data, must_fail) in enumerate(load):
        f = tmp_path / f"load{i}.json"
        f.write_bytes(data)
        code, out, err = run_main(["--load", str(f)])
        clean = _one_clean_line(code, err) and code == 2 and str(f) in err
        if not (clean or (code == 0 and not must_fail and out)):
            bad.append(([f"--load <case {i}: {data[:80]!r}>"], code, err.strip()[-300:]))
    assert not bad, f"{len(bad)} of {len(cases) + len(load)} failed:\n" + "\n".join(map(str, bad))


def test_no_arguments_print_the_usage(no_measuring):
    code, out, err = run_main([])
    assert code == 2 and err.startswith("usage: ") and "--shape" in err
    assert err.strip().splitlines()[-1].startswith("cudnn_explorer: error: nothing to do")


def test_version():
    from cudnn_explorer.core.version import __version__

    code, out, _ = run_main(["--version"])
    assert code == 0 and out.strip() == f"cudnn_explorer {__version__}"


def test_saved_file_still_renders(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(rich_exploration().to_json())
    code, out, err = run_main(["--load", str(f)])
    assert code == 0 and "IMPLICIT_PRECOMP_GEMM" in out, err


def test_outputs_written_atomically(tmp_path, monkeypatch):
    f = tmp_path / "r.json"
    f.write_text(rich_exploration().to_json())
    out_json, out_csv = tmp_path / "o.json", tmp_path / "o.csv"
    code, out, err = run_main(["--load", str(f), "--json", str(out_json), "--csv",
                               str(out_csv)])
    assert code == 0 and "IMPLICIT_PRECOMP_GEMM" in out  # the table too
    assert json.loads(out_json.read_text())["schema"] == "cudnn_explorer.exploration"
    assert out_csv.read_text().startswith("schema_version,")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".cudnn_explorer")] == []


# Every verb: its flags with malformed values, after each way the verb is begun.
_VERB_HEADS = {"model": [["model", "resnet18"], ["model"]],
               "advise": [["advise", "resnet18"], ["advise"]],
               "plans": [["plans", "write", "x.json"], ["plans", "show", "x.json"],
                         ["plans", "check", "x.json"], ["plans"]],
               "compare": [["compare", "a.json", "b.json"], ["compare"]],
               "history": [["history"]], "export": [["export"]],
               "plot": [["plot", "a.json"], ["plot"]],
               "tune": [["tune", "convs.json"], ["tune"]]}
_VERB_VALUES = _NUMBERS + ["", "x", "/nonexistent/f.json", "/proc/version", ".", "a,b",
                           "1:2:3", "0:0:0", "576:320:64", "1:2", "timm:nomodel",
                           "torchvision:resnet18(", "nope.json", "fp8", "all", "-", "x=1",
                           "1,2,3", "0x10", "a=1,b", "3x0x4"]


def _verb_cases():
    from cudnn_explorer.cli.main import VERBS

    rng = random.Random(7)
    for verb, heads in _VERB_HEADS.items():
        parser = importlib.import_module(f"cudnn_explorer.cli.{VERBS[verb]}").build_parser()
        flags = sorted({s for s in parser.flags if s.startswith("--")} - {"--help", "--debug"})
        for head in heads:
            for flag in flags:
                if parser.flags[flag].nargs == 0:
                    yield head + [flag]
                    continue
                for v in rng.sample(_VERB_VALUES, 10):
                    yield head + [flag, v]


def test_every_verb_refuses_malformed_values_in_one_line(tmp_path, monkeypatch):
    """Some of these are valid (a flag that takes any text); none may end in an internal
    error, a traceback or more than one line (without a GPU here, a valid one ends at the
    GPU check: exit 3)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CUDNN_EXPLORER_DEBUG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no results store of this machine's
    cases = list(_verb_cases())
    assert len(cases) >= 1500
    bad = []
    for argv in cases:
        code, out, err = run_main(argv)
        if not (_one_clean_line(code, err) or (code == 0 and "Traceback" not in err)):
            bad.append((argv, code, err.strip()[-300:]))
    assert not bad, f"{len(bad)} of {len(cases)} failed:\n" + "\n".join(map(str, bad))


@pytest.mark.parametrize("verb,saved,count", [  # a sweep renders in about 0.6 s
    ("advise", "tests/fixtures/advice_r50_b16_sizes_pinned_h200.json.gz", 40),
    ("model", "data/reference/h200-resnet50-b32-amp-fp16-nhwc.json.gz", 12)])
def test_mutated_saved_advice_and_sweeps_render_or_are_refused(verb, saved, count, tmp_path,
                                                                 no_measuring):
    """One field of a saved advice or sweep replaced by junk: --load renders it (exit 0)
    or refuses it in one line naming the file (exit 2), never a traceback."""
    import gzip
    import os

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    base = json.loads(gzip.decompress(open(os.path.join(root, saved), "rb").read()))
    paths = list(_leaves(base))
    rng = random.Random(7)
    bad = []
    for i in range(count):
        path, value = rng.choice(paths), rng.choice(_REPLACEMENTS + ["", 0, 2**40])
        f = tmp_path / f"{verb}{i}.json"
        f.write_text(json.dumps(_set(base, path, value), allow_nan=True))
        code, out, err = run_main([verb, "--load", str(f)])
        if not ((code == 0 and out and "Traceback" not in err)
                or (_one_clean_line(code, err) and code == 2 and str(f) in err)):
            bad.append((path, value, code, err.strip()[-300:]))
    assert not bad, "\n".join(map(str, bad))
