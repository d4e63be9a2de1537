"""Kept plans (pinning/kept.py) and pin()'s ``ahead`` and ``keep`` settings, without a GPU:
the file round-trips, and every way it can be wrong (another environment, corrupt,
another schema, a failed checksum) gives no plans and one note, never an exception."""
import base64
import gzip
import json
import os

import pytest

from cudnn_explorer.core.errors import UserError
from cudnn_explorer.pinning import ahead, kept

ENV = {"cudnn": "91900", "cudnn_frontend": "1.32.0", "gpu": "NVIDIA H100 80GB HBM3",
       "compute_capability": "9.0", "sm_count": 132}
PLANS = [([1, 0, 1, 1, 1, 1, 4, 8, 64, 56, 56], "ConvFwd_eng72_k2=1", b"\x00\x01form-a", True),
         ([1, 1, 1, 1, 1, 1, 4, 8, 64, 56, 56], "ConvBwdData_eng1_k2=3", b"form-b\xff", False)]


def _doc(path):
    with open(path, "rb") as f:
        return json.loads(gzip.decompress(f.read()))


def _write_doc(path, doc):
    with open(path, "wb") as f:
        f.write(gzip.compress(json.dumps(doc).encode()))


def test_kept_plans_round_trip(tmp_path):
    path = str(tmp_path / "p.json.kept")
    assert kept.write_kept(path, ENV, PLANS) == 2
    got, note = kept.read_kept(path, ENV)
    assert note is None
    assert sorted(got) == sorted((k, t, f) for k, t, f, _ in PLANS)
    doc = _doc(path)
    assert doc["schema"] == kept.KEPT_SCHEMA and doc["schema_version"] == 1
    assert [p["runtime_compiled"] for p in doc["plans"]] == [False, True]  # sorted by tag
    assert os.listdir(tmp_path) == ["p.json.kept"]  # no temporary file left


def test_no_kept_file_is_no_plans_and_no_note(tmp_path):
    assert kept.read_kept(str(tmp_path / "none.kept"), ENV) == ([], None)


def test_kept_plans_of_another_environment_are_not_used(tmp_path):
    path = str(tmp_path / "p.kept")
    kept.write_kept(path, dict(ENV, gpu="NVIDIA H200", cudnn="92400"), PLANS)
    got, note = kept.read_kept(path, ENV)
    assert got == []
    assert "another environment" in note and "gpu 'NVIDIA H200' here 'NVIDIA H100 80GB HBM3'" \
        in note and "cudnn '92400' here '91900'" in note and "\n" not in note


@pytest.mark.parametrize("content,why", [
    (b"not gzip", "not a gzip-compressed JSON file"),
    (gzip.compress(b"{not json"), "not a gzip-compressed JSON file"),
    (gzip.compress(b'{"schema": "cudnn_explorer.plans", "schema_version": 1}'),
     "not a cudnn_explorer kept plans file"),
    (gzip.compress(b'{"schema": "cudnn_explorer.kept_plans", "schema_version": 9}'),
     "schema_version 9"),
])
def test_a_broken_kept_file_gives_no_plans_and_one_note(tmp_path, content, why):
    path = tmp_path / "p.kept"
    path.write_bytes(content)
    got, note = kept.read_kept(str(path), ENV)
    assert got == [] and why in note and "building them" in note and "\n" not in note


def test_a_plan_whose_checksum_fails_is_left_out_and_counted(tmp_path):
    path = str(tmp_path / "p.kept")
    kept.write_kept(path, ENV, PLANS)
    doc = _doc(path)
    form = bytearray(base64.b64decode(doc["plans"][0]["form"]))
    form[0] ^= 1
    doc["plans"][0]["form"] = base64.b64encode(bytes(form)).decode()
    doc["plans"][1]["sha256"] = "0" * 64
    doc["plans"].append({"key": "x"})  # malformed: counted, not raised
    _write_doc(path, doc)
    got, note = kept.read_kept(path, ENV)
    assert got == []
    assert "3 plan(s) failed their checksum" in note


def test_a_failed_write_keeps_the_old_file(tmp_path, monkeypatch):
    path = str(tmp_path / "p.kept")
    kept.write_kept(path, ENV, PLANS[:1])
    before = open(path, "rb").read()

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError):
        kept.write_kept(path, ENV, PLANS)
    assert open(path, "rb").read() == before
    assert os.listdir(tmp_path) == ["p.kept"]  # the temporary file removed


def test_ahead_and_keep_settings():
    assert ahead.threads_of(False) == 0 and ahead.threads_of(3) == 3
    assert 1 <= ahead.threads_of(True) <= 8
    for bad in (0, 65, "4", 2.5):
        with pytest.raises(UserError, match=r"ahead .*: valid: True, False or a thread count"):
            ahead.threads_of(bad)
    assert ahead.kept_file_of(True, "r50.plans.json") == "r50.plans.json.kept"
    assert ahead.kept_file_of(True, None) is None  # a PlanFile given: nowhere beside it
    assert ahead.kept_file_of(False, "a.json") is None
    assert ahead.kept_file_of("/x/k.kept", None) == "/x/k.kept"
    for bad in ("", 3):
        with pytest.raises(UserError, match="keep .*: valid: True, False or a file's path"):
            ahead.kept_file_of(bad, "a.json")


def test_pin_refuses_a_bad_ahead_before_loading_anything(tmp_path):
    torch = pytest.importorskip("torch")
    import cudnn_explorer as ce

    model = torch.nn.Conv2d(3, 4, 3)
    with pytest.raises(UserError, match="ahead 'yes'"):
        ce.pin(model, str(tmp_path / "missing.json"), ahead="yes")
    assert type(model) is torch.nn.Conv2d


@pytest.mark.parametrize("content,what", [
    (b'{"schema": "cudnn_explorer.plans"}', "not gzip-compressed"),
    (gzip.compress(b'{"schema": "cudnn_explorer.sweep", "schema_version": 2}'),
     'of schema "cudnn_explorer.sweep"'),
])
def test_a_file_of_something_else_is_foreign_and_kept_plans_are_not(tmp_path, content, what):
    """What a write of kept plans would lose (a checkpoint, a sweep, the plan file given
    as keep=) is foreign: left as it is; kept plans of any version, or no file, are not."""
    path = tmp_path / "p.kept"
    assert kept.foreign(str(path)) is None
    path.write_bytes(content)
    assert kept.foreign(str(path)) == what
    kept.write_kept(str(path), ENV, PLANS)
    assert kept.foreign(str(path)) is None
    path.write_bytes(gzip.compress(b'{"schema": "cudnn_explorer.kept_plans", '
                                   b'"schema_version": 9}'))
    assert kept.foreign(str(path)) is None
    # kept plans a crash or a copy broke are written again: empty, cut short
    path.write_bytes(b"")
    assert kept.foreign(str(path)) is None
    kept.write_kept(str(path), ENV, PLANS)
    path.write_bytes(path.read_bytes()[:30])
    assert kept.foreign(str(path)) is None


def test_keep_refuses_the_plan_file_and_a_folder(tmp_path):
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.pinning.ahead import kept_file_of

    plans = tmp_path / "p.json"
    plans.write_text("{}")
    assert kept_file_of(True, str(plans)) == str(plans) + ".kept"
    assert kept_file_of(tmp_path / "k.kept", str(plans)) == str(tmp_path / "k.kept")
    with pytest.raises(UserError, match=r"keep '.*p.json': is the plan file; writing the kept "
                                        r"plans there would lose it"):
        kept_file_of(str(tmp_path / "." / "p.json"), str(plans))
    with pytest.raises(UserError, match="is a folder"):
        kept_file_of(str(tmp_path), str(plans))
    with pytest.raises(UserError, match="valid: True, False or a file's path"):
        kept_file_of(1, str(plans))


def test_kept_plans_are_not_written_over_a_file_of_something_else(tmp_path, monkeypatch):
    """pin(model, FILE, keep=PATH) with PATH a checkpoint: the builds' write-back warns
    and leaves it as it was; over kept plans it writes."""
    import warnings

    from cudnn_explorer.pinning import ahead, op

    monkeypatch.setattr(op, "wait_ahead", lambda: len(PLANS))
    monkeypatch.setattr(op, "kept_plans", lambda: list(PLANS))
    keys = frozenset(tuple(p[0]) for p in PLANS)
    ckpt = tmp_path / "ckpt.pt"
    ckpt.write_bytes(b"PK\x03\x04 a torch.save checkpoint")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ahead._write_back(str(ckpt), ENV, set(), keys)
    assert ckpt.read_bytes() == b"PK\x03\x04 a torch.save checkpoint"
    assert any("kept plans not written" in str(w.message) and "left as it is" in
               str(w.message) for w in seen), [str(w.message) for w in seen]
    fresh = tmp_path / "p.kept"
    ahead._write_back(str(fresh), ENV, set(), keys)
    got, note = kept.read_kept(str(fresh), ENV)
    assert note is None and len(got) == len(PLANS)
