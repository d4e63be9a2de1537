"""What a new user meets on a machine without a GPU: no command loses a file it
read, "-" means stdout carries the file alone, short aliases are checked as their long
forms, huge or empty --sizes and --plans are refused at once, one line per error, files
that are wrong are refused by name, a store the user named that is no store is their
mistake (exit 2), and every GPU verb says there is no GPU within a second."""
import gzip
import json
import os
import shutil
import sqlite3
import time

import pytest

from conftest import REPO, run_cli
from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.plans import PlanFile
from cudnn_explorer.jobs.plans import write_plans

REF = os.path.join(REPO, "data", "reference")
SWEEP = os.path.join(REF, "h200-resnet50-b32-amp-fp16-nhwc.json.gz")
RESULT = os.path.join(REF, "h200-default-fp32.json")
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}


def one_line(r, code=2, match=""):
    """The run ``r`` ended with ``code`` and one line on stderr that holds ``match``."""
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1, (r.returncode, r.stderr)
    assert lines[0].startswith("cudnn_explorer: error: ") and match in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    return lines[0]


# ---------------------------------------------------------------- 1. files a command read
def test_no_command_writes_over_a_file_it_reads(tmp_path):
    sweep = tmp_path / "sweep.json.gz"
    shutil.copy(SWEEP, sweep)
    before = sweep.read_bytes()
    os.symlink(sweep, tmp_path / "link.json.gz")
    for out in (str(sweep), str(tmp_path / "link.json.gz"),
                os.path.join(str(tmp_path), ".", "sweep.json.gz")):
        r = run_cli("plans", "write", str(sweep), "-o", out)
        one_line(r, 2, "is the saved sweep or exploration this command reads")
    assert sweep.read_bytes() == before
    # plot writes PATH.png, PATH.svg and PATH.json: the saved result at PATH.json is kept
    result = tmp_path / "r.json"
    shutil.copy(RESULT, result)
    r = run_cli("plot", "pareto", str(result), "--out", str(tmp_path / "r"))
    one_line(r, 2, "--out")
    assert result.read_bytes() == open(RESULT, "rb").read()
    assert not (tmp_path / "r.png").exists()
    # a plan file read by model and advise is not their --json; nor the store they use
    plans = tmp_path / "p.json"
    plans.write_text(write_plans(SWEEP).to_json())
    for verb in ("model", "advise"):
        r = run_cli(verb, "resnet18", "--plans", str(plans), "--json", str(plans), env=NO_GPU)
        one_line(r, 2, "is the plan file this command reads")
    store = tmp_path / "s.db"
    store.write_bytes(b"")
    r = run_cli("--shape", "1,3,8,8", "--store", str(store), "--json", str(store), env=NO_GPU)
    one_line(r, 2, "is the results store this command reads")
    r = run_cli("export", "--store", str(store), "--csv", str(store))
    one_line(r, 2, "is the results store this command reads")


def test_two_outputs_of_one_command_are_never_one_file(tmp_path):
    result = tmp_path / "r.json"
    shutil.copy(RESULT, result)
    out = tmp_path / "out.json"
    r = run_cli("--load", str(result), "--json", str(out), "--csv", str(tmp_path / "out.json"))
    one_line(r, 2, "and --csv")
    r = run_cli("--load", str(result), "--csv", str(result))
    one_line(r, 2, "is the saved result this command reads")
    r = run_cli("export", "--json", str(out), "--csv", os.path.join(str(tmp_path), ".",
                                                                      "out.json"))
    one_line(r, 2, "one file for two outputs")
    r = run_cli("model", "resnet18", "--target", "h200", "--plot", str(out), "--json",
                str(out))
    one_line(r, 2, "one file for two outputs")
    assert not out.exists() and result.read_bytes() == open(RESULT, "rb").read()


# ---------------------------------------------------------------- 2. "-" is stdout alone
def test_dash_means_stdout_carries_the_file_alone(tmp_path):
    r = run_cli("plans", "write", SWEEP, "-o", "-")
    assert r.returncode == 0, r.stderr
    assert PlanFile.read(r.stdout).source  # the whole of stdout is the plan file
    r = run_cli("export", "--json", "-", "--csv", "-")
    one_line(r, 2, "--json - and --csv - all write to stdout")


# ---------------------------------------------------------------- 3. short aliases
@pytest.mark.parametrize("alias", [["-o", "x.json"], ["-ox.json"], ["-o=x.json"],
                                   ["--out", "x.json"]])
def test_a_short_alias_is_refused_as_its_long_form(tmp_path, alias):
    plans = tmp_path / "p.json"
    plans.write_text(write_plans(SWEEP).to_json())
    for action in ("show", "check"):
        r = run_cli("plans", action, str(plans), *alias)
        one_line(r, 2, f"--out would be ignored: plans {action} reads a plan file")
    assert not (tmp_path / "x.json").exists() and not os.path.exists(
        os.path.join(REPO, "x.json"))


# ---------------------------------------------------------------- 4. --sizes, --plans
@pytest.mark.parametrize("sizes,match", [
    ("1:10000000000000:1", "START and STOP: valid: integers from 1 to 65536"),
    ("1:99999999999999999999999999:1", "START and STOP: valid"),
    ("1:" + "9" * 5000 + ":1", "START and STOP: valid"),
    ("1:65536:1", "65536 sizes; valid: 1 to 256"),
    ("64:32:1", "0 sizes; valid: 1 to 256"),
    ("1:8:0", "STEP 0: valid: an integer >= 1"),
    ("", "expected START:STOP:STEP"),
    (" ", "expected START:STOP:STEP"),
    ("٨,١٦", "expected START:STOP:STEP"),
    ("8,16,", "expected START:STOP:STEP"),
    ("1:2", "expected START:STOP:STEP"),
    ("8,8", "a size is listed twice"),
    ("0,8", "each from 1 to 65536"),
])
def test_bad_sizes_are_refused_at_once(sizes, match):
    from cudnn_explorer.model.zoo import parse_sizes

    t = time.perf_counter()
    with pytest.raises(UserError, match=match) as e:
        parse_sizes(sizes)
    assert time.perf_counter() - t < 0.1 and f"--sizes '{sizes}'" in str(e.value)


def test_good_sizes_and_the_api_takes_no_huge_range():
    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.model.zoo import parse_sizes

    assert parse_sizes("320:640:32") == list(range(320, 641, 32))
    assert parse_sizes(" 8 , 16 ") == [8, 16] and parse_sizes("1:256:1")[-1] == 256
    for huge in (range(1, 10**13), range(1, 10**26), iter(lambda: 8, None)):
        with pytest.raises(UserError, match="sizes .*: valid: 1 to 256 different sizes"):
            ModelSpec.create("resnet18", sizes=huge)
    with pytest.raises(UserError, match="sizes 5: valid"):
        ModelSpec.create("resnet18", sizes=5)
    assert ModelSpec.create("resnet18", sizes=range(8, 17, 8)).sizes == [8, 16]


@pytest.mark.parametrize("verb", ["model", "advise"])
@pytest.mark.parametrize("args,match", [
    (["--sizes", "1:10000000000000:1"], "--sizes '1:10000000000000:1'"),
    (["--sizes", ""], "--sizes '': expected"),
    (["--sizes", "٨,١٦"], "--sizes '٨,١٦': expected"),
    (["--plans", ""], "--plans '': give a plan file's path"),
])
def test_model_and_advise_refuse_empty_and_huge_values(verb, args, match):
    r = run_cli(verb, "resnet18", *args, env=NO_GPU)
    one_line(r, 2, match)


# ---------------------------------------------------------------- 5. one line, no note first
@pytest.mark.parametrize("args,match", [
    (["resnet5O"], "unknown model 'resnet5O'; close names: resnet50"),
    (["--model", "nosuchmod:f"], "cannot import nosuchmod"),
    (["resnet18", "--model-args", '{"nosuch": 1}'], "unexpected keyword argument"),
    (["resnet18", "--inputs", "nosuchmod:f"], "--inputs 'nosuchmod:f'"),
])
def test_a_bad_model_on_the_cpu_is_one_line_without_the_cpu_note(args, match):
    r = run_cli("model", *args, "--capture-only", env=NO_GPU)
    one_line(r, 2, match)


# ---------------------------------------------------------------- 6. wrong files
def _plans():
    return json.loads(write_plans(SWEEP).to_json())


def test_a_plan_whose_tag_is_of_another_direction_is_refused():
    d = _plans()
    fwd = next(k for k, e in enumerate(d["entries"]) if e["key"]["direction"] == "fwd")
    d["entries"][fwd]["tag"] = d["entries"][fwd]["tag"].replace("ConvFwd_", "ConvBwdData_")
    with pytest.raises(UserError, match=rf"entries\[{fwd}\].tag: ConvBwdData_eng.* is a "
                                        r"bwd-data engine config, in a fwd plan; valid: a "
                                        r"ConvFwd_ tag"):
        PlanFile.read(json.dumps(d))


def test_a_plan_file_without_entries_is_refused_and_no_plans_is_read():
    d = _plans()
    d["entries"] = []
    assert PlanFile.read(json.dumps(d)).entries == []
    del d["entries"]
    with pytest.raises(UserError, match=r"plan file.entries: missing"):
        PlanFile.read(json.dumps(d))


@pytest.mark.parametrize("value,match", [
    ("1", 'schema_version "1" is a string, not an integer: this cudnn_explorer reads '
          'version 1'),
    (1.0, "schema_version 1.0 is a number with a decimal point"),
    (True, "schema_version true is a boolean"),
    (None, "schema_version missing"),
    (2, "schema_version 2: this cudnn_explorer reads version 1; upgrade cudnn_explorer"),
])
def test_a_schema_version_of_the_wrong_type_says_so(value, match):
    d = _plans()
    d["schema_version"] = value
    with pytest.raises(UserError, match=match):
        PlanFile.read(json.dumps(d))


def test_every_reader_names_a_string_schema_version():
    from cudnn_explorer.core.schema import check_version
    from cudnn_explorer.core.model_sweep import ModelSweep

    d = json.loads(gzip.decompress(open(SWEEP, "rb").read()))
    d["schema_version"] = "2"
    with pytest.raises(UserError, match='sweep schema_version "2" is a string, not an '
                                        'integer: this cudnn_explorer reads versions 1, 2'):
        ModelSweep.from_dict(d)
    with pytest.raises(UserError, match="result schema_version 9: this cudnn_explorer reads "
                                        "versions 1 to 6; upgrade cudnn_explorer"):
        check_version(9, (1, 2, 3, 4, 5, 6), "result")
    check_version(6, tuple(range(1, 7)), "result")  # a version it reads: no error


# ---------------------------------------------------------------- 7. a named bad store
@pytest.mark.parametrize("argv", [["history"], ["export", "--json", "OUT"], ["compare"],
                                  ["plans", "write", "-o", "OUT"]])
@pytest.mark.parametrize("kind", ["junk", "folder"])
def test_a_store_the_user_named_that_is_no_store_is_their_mistake(tmp_path, argv, kind):
    store = tmp_path / "some.bin"
    if kind == "folder":
        store.mkdir()
    else:
        store.write_bytes(os.urandom(4096))
    argv = [str(tmp_path / "out.json") if a == "OUT" else a for a in argv]
    r = run_cli(*argv, "--store", str(store))
    line = one_line(r, 2, f"results store '{store}'")
    assert ("a folder" if kind == "folder" else "not a database") in line
    if kind == "junk":  # the user's file is left as it was
        with pytest.raises(sqlite3.DatabaseError):
            sqlite3.connect(str(store)).execute("SELECT * FROM sqlite_master").fetchall()


# ---------------------------------------------------------------- 8. no GPU: said at once
from cudnn_explorer.measure.driver import no_gpu_reason  # noqa: E402  (the real probe)


class FakeDriver:
    """libcuda's two calls the probe makes: cuInit's result code, and the GPU count."""

    def __init__(self, init=0, count=0, raises=False):
        self.init, self.count, self.raises = init, count, raises

    def cuInit(self, flags):
        if self.raises:
            raise OSError("a broken library")
        return self.init

    def cuDeviceGetCount(self, ref):
        ref._obj.value = self.count
        return 0


@pytest.mark.parametrize("lib,visible,reason", [
    (None, None, "no NVIDIA driver: libcuda.so.1 not found"),
    (FakeDriver(init=100), None, "the NVIDIA driver says CUDA_ERROR_NO_DEVICE"),
    (FakeDriver(init=35), None, "CUDA_ERROR_INSUFFICIENT_DRIVER"),
    (FakeDriver(count=0), None, "the NVIDIA driver sees no GPU"),
    (FakeDriver(count=2), "", "CUDA_VISIBLE_DEVICES hides every GPU"),
    (FakeDriver(count=2), "-1", "CUDA_VISIBLE_DEVICES hides every GPU"),
    (FakeDriver(count=2), None, None),
    (FakeDriver(count=1), "0", None),
    (FakeDriver(init=999), None, None),  # an answer it does not know: torch's check decides
    (FakeDriver(raises=True), None, None),
])
def test_the_driver_probe_says_no_only_when_sure(monkeypatch, lib, visible, reason):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    got = no_gpu_reason(lambda: lib, gpus=lambda: None)
    assert got == reason if reason is None else reason in got


def test_the_driver_probe_leaves_a_listed_gpu_to_torch_without_cuinit(monkeypatch):
    """Where the kernel driver lists a GPU, libcuda is not even loaded (no cuInit in a
    process that will fork, or in the API's caller); CUDA_VISIBLE_DEVICES still counts."""
    def load():
        raise AssertionError("libcuda loaded although a GPU is listed")

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert no_gpu_reason(load, gpus=lambda: 2) is None
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "hides every GPU" in no_gpu_reason(load, gpus=lambda: 2)


GPU_VERBS = [["--shape", "1,3,8,8"], ["--shape", "1,3,8,8", "--store", "STORE"],
             ["--dump-device-profile", "OUT"], ["model", "resnet50", "--batch", "2"],
             ["model", "resnet50", "--plans", "PLANS"], ["advise", "resnet50", "--batch", "2"],
             ["plans", "check", "PLANS"], ["tune", "REC", "-o", "OUT", "--no-store"]]


@pytest.mark.parametrize("argv", GPU_VERBS, ids=lambda a: " ".join(a[:2]))
def test_every_gpu_verb_says_there_is_no_gpu_within_a_second(tmp_path, argv):
    plans = tmp_path / "p.json"
    plans.write_text(write_plans(SWEEP).to_json())
    from cudnn_explorer.core.plans import native_key
    from cudnn_explorer.core.zero_code import ConvRecord, RecordedConv, merge_records

    rec = tmp_path / "convs.json"  # a record of the sweep's first problem-direction
    first = PlanFile.read(plans.read_text()).entries[0]
    rec.write_text(merge_records([ConvRecord(convs=[RecordedConv(
        key=native_key(first), description="conv", calls=1)], pid=1)]).to_json())
    argv = [{"PLANS": str(plans), "OUT": str(tmp_path / "o.json"), "REC": str(rec),
             "STORE": str(tmp_path / "s.db")}.get(a, a) for a in argv]
    t = time.perf_counter()
    r = run_cli(*argv, env=NO_GPU)
    took = time.perf_counter() - t
    one_line(r, 3, "no usable CUDA GPU (CUDA_VISIBLE_DEVICES hides every GPU)")
    assert took < 1.0, f"{took:.2f} s"


def test_the_api_says_there_is_no_gpu_within_a_second_before_any_process(monkeypatch):
    import cudnn_explorer as ce
    from cudnn_explorer.core.errors import MissingDependencyError
    from cudnn_explorer.jobs import advise as advise_job  # noqa: F401  (before the patches)
    from cudnn_explorer.jobs import sweep as job
    from cudnn_explorer.measure import driver

    monkeypatch.setattr(driver, "no_gpu_reason", no_gpu_reason)  # the real probe
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    started = []
    # a process started (SweepRun's, for sweep_model and advise) would be recorded, not started
    monkeypatch.setattr(job, "mode_starts", lambda *a, **k: started.append(a))
    monkeypatch.setattr(job, "worker_ahead", lambda *a, **k: started.append(a))
    calls = [lambda: ce.explore(ce.ConvProblem.create(shape=(1, 3, 8, 8))),
             lambda: ce.sweep_model("resnet50", batch=2),
             lambda: ce.advise("resnet50", batch=2)]
    for call in calls:
        t = time.perf_counter()
        with pytest.raises(MissingDependencyError, match="no usable CUDA GPU"):
            call()
        assert time.perf_counter() - t < 1.0
    assert started == []


# ---------------------------------------------------------------- errors that name the thing
@pytest.mark.parametrize("source", [RESULT, SWEEP])
def test_plans_write_names_the_filter_that_left_nothing(source, tmp_path):
    out = str(tmp_path / "p.json")
    for argv in (["plans", "write", "--cudnn", "abc", source, "-o", out],  # FILE after it
                 ["plans", "write", source, "-o", out, "--gpu", "A100", "--cudnn", "9.19.0"]):
        line = one_line(run_cli(*argv), 2, "no result matches the filters ")
        assert ("cuDNN 'abc'" in line or "GPU 'A100', cuDNN '9.19.0'" in line) and \
            "there: NVIDIA H200 (cuDNN 9.19.0)" in line
    assert not os.path.exists(out)
    r = run_cli("plans", "write", "--gpu", "h200", source, "-o", out)
    assert r.returncode == 0 and PlanFile.read(open(out).read()).entries, r.stderr


@pytest.mark.parametrize("argv,match", [
    (["--load", os.path.join(REF, "h100-same-answers", "default.json")],
     "(a staged search compared with a full one, per problem: the data behind "
     "docs/benchmarks.md's 'The same answers')"),
    (["--load", os.path.join(REPO, "tests", "fixtures", "default_benchmark.result.json")],
     "a PyTorch child process's raw result"),
    (["--load", SWEEP], "(a model sweep: render it with 'model --load FILE'"),
    (["model", "--load", os.path.join(REPO, "tests", "fixtures",
                                      "advice_r50_b16_sizes_h200.json.gz")],
     "(an advice: render it with 'advise --load FILE')"),
    (["advise", "--load", RESULT], "(one problem's result: render it with '--load FILE'"),
    (["plans", "show", RESULT], "(one problem's result"),
    (["plot", "gaps", RESULT], "(one problem's result"),
])
def test_a_file_of_another_kind_names_the_command_that_reads_it(argv, match):
    one_line(run_cli(*argv), 2, match)


# ---------------------------------------------------------------- options alike in verbs
@pytest.mark.parametrize("verb", ["model", "advise"])
def test_verbose_is_taken_by_model_and_advise_alike(verb):
    one_line(run_cli(verb, "resnet18", "--verbose", env=NO_GPU), 3, "no usable CUDA GPU")
    one_line(run_cli(verb, "resnet18", "--verbose", "--quiet", env=NO_GPU), 2,
             "--verbose would be ignored: --quiet turns progress off")


# ---------------------------------------------------------------- tags show what differs
def test_a_cut_tag_keeps_what_differs_from_the_others():
    from cudnn_explorer.report.format import distinct_tags

    a100, l4 = "ConvFwd_eng22_k2=4_k13=0_k14=2_k18=0_k23=0", "eng22_k2=4_k13=0_k14=2_k18=0_k23=2"
    other = "eng62_k2=5_k13=1_k18=0_k25=1_k27=8_k28=1"
    shown = distinct_tags([a100, l4, other, "eng1_k2=4_k3=0", None], 24)
    assert shown[a100] == "eng22_k2=4_k13=0~k23=0" and shown[l4] == "eng22_k2=4_k13=0~k23=2"
    assert shown[other] == "eng62_k2=5_k13=1_k18=0_~"  # no other eng62: cut at the end
    assert shown["eng1_k2=4_k3=0"] == "eng1_k2=4_k3=0" and None not in shown
    many = ["eng62_k2=0_k13=1_k18=0_k25=1_k27=8_k28=1", "eng62_k2=3_k13=1_k18=0_k25=0_k27=9"]
    got = distinct_tags(many, 20)
    assert got[many[0]] != got[many[1]] and all(len(v) <= 20 for v in got.values())
    assert all(v.startswith("eng62_k2=") and "~k25=" in v for v in got.values())


def test_compare_shows_different_tags_differently():
    """In compare's table of the shipped results, the environments' picks that differ
    never show the same text, and each shows in the table."""
    from cudnn_explorer.core.choices import chosen
    from cudnn_explorer.core.documents import saved_explorations
    from cudnn_explorer.report.compare import render_compare, shared_groups
    from cudnn_explorer.report.format import distinct_tags

    files = (RESULT, SWEEP, os.path.join(REF, "h100-resnet50-b32-amp-fp16-nhwc.json.gz"))
    items = [(e.problem, e.environment, d) for f in files
             for e in saved_explorations(f, "--file") for d in e.directions]
    shared, _ = shared_groups(items)
    text = render_compare(items)
    differing = 0
    for by_env in shared.values():
        tags = {chosen(d)[0].engine_tag for d in by_env.values()}
        if len(tags) > 1:
            differing += 1
            shown = distinct_tags(list(tags), 20)  # as the table's pick column shows them
            assert len(set(shown.values())) == len(tags), shown
            assert all(f"  {shown[t]}  " in text for t in tags), shown
    assert differing > 5 and "~ inside a config" in text


@pytest.mark.ext
def test_target_rows_show_where_the_a100_and_the_l4_differ():
    r = run_cli("--shape", "32,64,56,56", "--dtype", "float16", "--layout", "nhwc",
                "--direction", "fwd", "--target", "a100,l4", "--no-store", env=NO_GPU)
    assert r.returncode == 0, r.stderr
    rows = {line.split()[0]: line.split()[3:5] for line in r.stdout.splitlines()
            if line.startswith(("a100", "l4"))}
    assert "2 different heuristic picks" in r.stdout
    assert rows["a100*"][1] != rows["l4*"][1], rows  # the picks differ, and so do their texts


def test_model_json_dash_on_the_cpu_is_the_capture_alone():
    r = run_cli("model", "resnet18", "--capture-only", "--batch", "2", "--image", "32",
                "--json", "-", env=NO_GPU)
    assert r.returncode == 0, r.stderr
    from cudnn_explorer.core.capture import Capture

    cap = Capture.from_json_dict(json.loads(r.stdout))  # the whole of stdout
    assert len(cap.problems) > 5 and "wrote" not in r.stderr


@pytest.mark.parametrize("argv", [["--shape", "1,3,8,8", "--target", "PROF", "--json", "PROF"],
                                  ["model", "resnet50", "--target", "l4,PROF", "--json",
                                   "PROF"]], ids=["problem", "model"])
def test_a_target_profile_file_is_never_written_over(tmp_path, argv):
    prof = tmp_path / "prof.json"
    shutil.copy(os.path.join(REPO, "data", "devices", "nvidia-a100-sxm4-80gb.json"), prof)
    before = prof.read_bytes()
    r = run_cli(*[str(prof) if a == "PROF" else a.replace("PROF", str(prof)) for a in argv])
    assert r.returncode == 2 and "--target profile" in r.stderr, r.stderr
    assert prof.read_bytes() == before
