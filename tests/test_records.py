"""Records: ranking, workspace notes, JSON and CSV round trips, schema versions."""
import json
from typing import List

import pytest

from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.records import MIB
from cudnn_explorer.core.exploration import SCHEMA_VERSION, Exploration
from cudnn_explorer.report.export import rows_from_csv, rows_to_csv
from cudnn_explorer.report.format import fmt_cuda, fmt_version

from fakes import exploration, fwd_result


def test_ranked_fastest_first_then_failures():
    d = fwd_result()
    names = [r.algo_name for r in d.ranked()]
    assert names[:3] == ["IMPLICIT_PRECOMP_GEMM", "GEMM", "IMPLICIT_GEMM"]
    assert set(names[3:]) == {"FFT_TILING", "WINOGRAD"}
    assert d.best().algo_name == "IMPLICIT_PRECOMP_GEMM"
    assert d.heuristic_rank(d.best()) == 1
    assert d.heuristic_rank(d.find[2]) is None


def test_no_success_means_no_best():
    d = fwd_result()
    for r in d.find:
        r.status = "CUDNN_STATUS_NOT_SUPPORTED"
    assert d.best() is None


def test_workspace_note_only_when_short():
    d = fwd_result(cap=100 * MIB)
    fft = next(r for r in d.find if r.algo_name == "FFT_TILING")
    assert fft.note.startswith("needs 900.00 MiB workspace > 100.00 MiB given")
    assert "--max-workspace" in fft.note
    wino = next(r for r in d.find if r.algo_name == "WINOGRAD")
    assert wino.note == ""  # not supported, not short of workspace
    assert fwd_result().find[3].note == ""  # uncapped: enough workspace


def test_workspace_note_says_when_the_gpu_was_short():
    from cudnn_explorer.core.records import find_row_note

    # cut to what was free (1.5 GiB), less the headroom left to cuDNN: the memory's fault
    note = find_row_note(900 * MIB, 600 * MIB, False, 728 * MIB)
    assert note == ("needs 900.00 MiB workspace > 600.00 MiB given (out of GPU memory: "
                    "728.00 MiB free)")
    assert "--max-workspace" in find_row_note(900 * MIB, 100 * MIB, True, None)
    assert find_row_note(90 * MIB, 100 * MIB, True, 50 * MIB) == ""  # it fitted


def test_json_round_trip():
    e = exploration()
    back = Exploration.from_json(e.to_json())
    assert back == e
    assert json.loads(e.to_json())["schema_version"] == SCHEMA_VERSION


def test_a_timing_keeps_its_first_launch_apart():
    """Timing.first_ms: the native result's first launch (module loading included), in
    no statistic; none where it was not timed (a native -1, or a result that does not
    say); a file written before the field reads as None."""
    from types import SimpleNamespace

    from cudnn_explorer.core.records import Timing
    from cudnn_explorer.measure.timing import timing_from_native

    native = dict(per_launch_ms=[0.5, 0.4, 0.6, 0.5, 0.5], launches_per_sample=2,
                  method="graph", warmup_launches=6, note="", eager_per_call_ms=[],
                  eager_calls_per_sample=0)
    t = timing_from_native(SimpleNamespace(first_ms=3.25, **native))
    assert t.first_ms == 3.25 and t.median_ms == 0.5 and t.min_ms == 0.4
    assert timing_from_native(SimpleNamespace(first_ms=-1.0, **native)).first_ms is None
    assert timing_from_native(SimpleNamespace(**native)).first_ms is None
    assert Timing.from_dict(t.to_dict()) == t
    old = t.to_dict()
    del old["first_ms"]
    assert Timing.from_dict(old).first_ms is None


def test_json_ignores_unknown_keys_for_forward_compatibility():
    d = json.loads(exploration().to_json())
    d["future_top"] = 1
    d["directions"][0]["future_list"] = [{"tag": "ConvFwd_eng46_k2=4"}]
    d["directions"][0]["find"][0]["retimed_ms"] = 0.057
    d["environment"]["sm_clock"] = 1980
    back = Exploration.from_dict(d)
    assert back.directions[0].find[0].time_ms == pytest.approx(0.283)


@pytest.mark.parametrize("mutate,match", [
    (lambda d: d.update(schema="other"), "not a cudnn_explorer result"),
    (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "upgrade cudnn_explorer"),
])
def test_json_rejects_foreign_or_newer(mutate, match):
    d = json.loads(exploration().to_json())
    mutate(d)
    with pytest.raises(UserError, match=match):
        Exploration.from_dict(d)


def test_json_rejects_garbage():
    with pytest.raises(UserError, match="not valid JSON"):
        Exploration.from_json("{nope")
    with pytest.raises(UserError, match="top level"):
        Exploration.from_json("[1, 2]")


def test_csv_round_trip():
    e = exploration(cap=100 * MIB)
    rows = rows_from_csv(rows_to_csv(e))
    d = e.directions[0]
    assert [r["result"] for r in rows] == d.ranked()
    assert rows[0]["best"] == "yes" and all(r["best"] == "" for r in rows[1:])
    assert rows[0]["rank"] == "1" and rows[-1]["rank"] == ""
    assert rows[0]["input_shape"] == "32x3x224x224"
    assert rows[0]["gpu_name"] == "NVIDIA H200"


def test_csv_rejects_foreign():
    with pytest.raises(UserError, match="missing columns"):
        rows_from_csv("a,b\n1,2\n")


def test_version_formatting():
    assert fmt_version("91900") == "9.19.0"
    assert fmt_version("92400") == "9.24.0"
    assert fmt_version("8907") == "8.9.7"
    assert fmt_version("x") == "x"
    assert fmt_cuda("13000") == "13.0" and fmt_cuda("12080") == "12.8"


def _readers():
    """(read a document's dict, its schema name, what it is in words) of every saved
    document kind."""
    from cudnn_explorer.core import advice, capture, plans, model_sweep
    from cudnn_explorer.core.exploration import SCHEMA_NAME

    return [(Exploration.from_dict, SCHEMA_NAME, "result"),
            (model_sweep.ModelSweep.from_dict, model_sweep.SWEEP_SCHEMA, "sweep"),
            (lambda d: plans.PlanFile.read(json.dumps(d)), plans.PLANS_SCHEMA, "plan file"),
            (lambda d: advice.Advice.from_json(json.dumps(d)), advice.ADVICE_SCHEMA, "advice"),
            (capture.Capture.from_json_dict, capture.CAPTURE_SCHEMA, "capture")]


@pytest.mark.parametrize("k", range(5))
def test_every_document_refuses_a_foreign_or_newer_file_in_one_format(k):
    read, name, what = _readers()[k]
    with pytest.raises(UserError) as e:
        read({"schema": "other", "schema_version": 1})
    assert str(e.value) == f"not a cudnn_explorer {what}: schema is \"other\", expected {name!r}"
    for version, newer in ((99, True), ("1", False), (True, False)):
        with pytest.raises(UserError) as e:
            read({"schema": name, "schema_version": version})
        text = str(e.value)
        kind = "" if isinstance(version, int) and not isinstance(version, bool) else \
            f" is {'a string' if isinstance(version, str) else 'a boolean'}, not an integer"
        assert text.startswith(f"{what} schema_version {json.dumps(version)}{kind}: this "
                               f"cudnn_explorer reads version"), text
        assert text.endswith("; upgrade cudnn_explorer") == newer, text


@pytest.mark.parametrize("hint, value, message", [
    (List[int], [1, 2, True], "key.x_dims[2]: true is not an integer >= 0"),
    (List[int], [1, -2], "key.x_dims[1]: -2 is not an integer >= 0"),
    (List[int], [1, 2.5], "key.x_dims[1]: 2.5 is not an integer >= 0"),
    (List[str], ["a", 3], "key.x_dims[1]: 3 is not a string"),
    (List[float], [1.0, -1], "key.x_dims[1]: -1 is not a finite number >= 0"),
])
def test_a_bad_item_of_a_list_is_named_by_its_index(hint, value, message):
    from cudnn_explorer.core.schema import convert

    with pytest.raises(UserError) as e:
        convert(value, hint, "key.x_dims")
    assert str(e.value) == message


def test_a_list_of_scalars_reads_as_a_new_list_of_the_same_values():
    from cudnn_explorer.core.schema import convert

    ints = [1, 2, 3]
    got = convert(ints, List[int], "p")
    assert got == ints and got is not ints
    assert convert([1, 2], List[float], "p") == [1.0, 2.0]
    assert all(type(v) is float for v in convert([1, 2], List[float], "p"))


def test_every_reader_takes_only_text_and_says_so():
    """A reader handed something that is not a file's text (None, a number, an open file
    object) or an integer too long to read: one UserError, not json's TypeError."""
    import pytest

    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.core.exploration import Exploration
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.core.plans import PlanFile
    from cudnn_explorer.core.zero_code import ConvRecord, RunReport

    for read in (Exploration.from_json, PlanFile.read, ConvRecord.read, RunReport.read):
        for junk in (None, 123, [1, 2]):
            with pytest.raises(UserError, match="expected a saved file's text, got a"):
                read(junk)
    with pytest.raises(UserError, match="not valid JSON: Exceeds the limit"):
        Exploration.from_json("1" * 5000)
    with pytest.raises(UserError, match="not a text file"):
        Exploration.from_json(bytearray(b"\xff{"))
    from fakes import exploration

    saved = exploration().to_json().encode()  # an editor's byte-order mark in front
    assert Exploration.from_json(b"\xef\xbb\xbf" + saved) == Exploration.from_json(saved)
    with pytest.raises(UserError, match="expected an object of ExploreOptions fields"):
        ExploreOptions.from_dict([1, 2])
