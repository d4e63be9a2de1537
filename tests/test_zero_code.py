"""Zero-code adoption on the CPU: the keys back to problems, the variables, the record and
report formats and their merges, the start-up hook's cost when unset, and the record and
run verbs on real programs (on the CPU the op keys no call: those calls are counted as
"not on a CUDA device"; tests/test_gpu_zero_code.py records real keys)."""
import json
import os
import subprocess
import sys

import pytest

from cudnn_explorer.core.errors import UserError
from cudnn_explorer.core.pin_report import PinCounts, PinnedDirection
from cudnn_explorer.core.plans import native_key_of, problem_of_key
from cudnn_explorer.core.problem import DIRECTIONS, ConvProblem
from cudnn_explorer.core.zero_code import (ConvRecord, RecordedConv, RunReport, Unkeyed,
                                           exit_line, merge_records, merge_reports,
                                           read_convs, settings_from)
from cudnn_explorer.core.zero_code import PTH_LINE

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

PROBLEMS = [
    ConvProblem.create((2, 3, 9), 4, 3),
    ConvProblem.create((2, 3, 9), 4, 1, padding=0),
    ConvProblem.create((1, 2, 1, 9), 4, (1, 3), padding=(0, 1)),  # a 1-D problem's key
    ConvProblem.create((8, 16, 32, 32), 32, 3),
    ConvProblem.create((8, 16, 32, 32), 32, 3, stride=2, dilation=2, padding=3),
    ConvProblem.create((4, 32, 14, 14), 32, 3, groups=32, dtype="float16", layout="nhwc"),
    ConvProblem.create((4, 32, 14, 14), 64, (1, 3), groups=4, dtype="bfloat16"),
    ConvProblem.create((4, 8, 7, 7), 8, 5, dtype="float64"),
    ConvProblem.create((4, 8, 7, 7), 8, 5, tf32=False),
    ConvProblem.create((2, 4, 8, 8, 8), 6, 3, layout="nhwc", dtype="float16"),
    ConvProblem.create((2, 4, 5, 6, 7), 6, (1, 2, 3), stride=(1, 2, 1), padding=0),
]


@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: p.describe()[:50])
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_key_back_to_problem(problem, direction):
    key = native_key_of(problem, direction)
    back, d = problem_of_key(key)
    assert d == direction and native_key_of(back, d) == key
    one_d_form = problem.spatial_dims == 2 and problem.input_shape[2] == 1 and \
        problem.kernel[0] == 1 and problem.layout == "nchw"
    if not one_d_form:  # Note [keys back to problems]: that one comes back as 1-D
        assert back == problem
    else:
        assert back.spatial_dims == 1 and back.input_shape == (1, 2, 9)


@pytest.mark.parametrize("key, says", [
    ([1, 0, 0], "not a list of integers"),
    ([2] + native_key_of(PROBLEMS[3], "fwd")[1:], "not a version-1 key"),
    (native_key_of(PROBLEMS[3], "fwd")[:-1], "not a version-1 key"),
    (native_key_of(PROBLEMS[3], "fwd")[:7 + 8] + [9, 9, 9, 9] + native_key_of(
        PROBLEMS[3], "fwd")[7 + 12:], "not those of one convolution"),
    ([1, 0, 0, 1, 3] + native_key_of(PROBLEMS[3], "fwd")[5:], "not a convolution"),
])
def test_bad_keys(key, says):
    with pytest.raises(UserError, match=says):
        problem_of_key(key)


def test_settings():
    assert settings_from({}).mode == ""
    s = settings_from({"CUDNN_EXPLORER_PLANS": "p.json", "CUDNN_EXPLORER_STRICT": "1",
                       "CUDNN_EXPLORER_AHEAD": "0", "CUDNN_EXPLORER_REPORT": "r-%p.json"})
    assert (s.mode, s.plans, s.strict, s.ahead, s.keep, s.report) == \
        ("run", "p.json", True, 0, True, "r-%p.json")
    assert settings_from({"CUDNN_EXPLORER_RECORD": "d", "CUDNN_EXPLORER_STEPS": "5"}).steps == 5
    for name, value, valid in [("CUDNN_EXPLORER_STRICT", "maybe", "valid: 0 or 1"),
                               ("CUDNN_EXPLORER_AHEAD", "65", "valid: an integer from 0 to 64"),
                               ("CUDNN_EXPLORER_STEPS", "-1", "valid: an integer from 1 to")]:
        with pytest.raises(UserError, match=f'^{name}="{value}": {valid}'):
            settings_from({"CUDNN_EXPLORER_PLANS": "p.json", name: value})
    with pytest.raises(UserError, match="both set"):
        settings_from({"CUDNN_EXPLORER_PLANS": "p", "CUDNN_EXPLORER_RECORD": "d"})
    # an output over the plan file, or over the other output, would lose it
    for over, on in (("CUDNN_EXPLORER_REPORT", "CUDNN_EXPLORER_PLANS"),
                     ("CUDNN_EXPLORER_MISSES", "CUDNN_EXPLORER_PLANS")):
        with pytest.raises(UserError, match=f'^{over}="./p.json": the file {on} names too'):
            settings_from({"CUDNN_EXPLORER_PLANS": "p.json", over: "./p.json"})
    with pytest.raises(UserError, match='^CUDNN_EXPLORER_MISSES="m": the file '
                                        'CUDNN_EXPLORER_REPORT names too'):
        settings_from({"CUDNN_EXPLORER_RECORD": "d", "CUDNN_EXPLORER_REPORT": "m",
                       "CUDNN_EXPLORER_MISSES": "m"})


def _part(pid, calls, host="a"):
    rows = [RecordedConv(key=native_key_of(p, d), description=f"{d} of {p.describe()}",
                         calls=calls) for p in PROBLEMS[3:5] for d in DIRECTIONS]
    return ConvRecord(convs=rows, unkeyed=[Unkeyed("its tensors are not on a CUDA device", 1)],
                      steps=pid, host=host, pid=pid)


def test_record_merge_and_round_trip(tmp_path):
    merged = merge_records([_part(11, 3), _part(12, 4, "b")], command=["python", "t.py"])
    assert merged.processes == 2 and merged.steps == 12 and len(merged.convs) == 6
    assert {c.calls for c in merged.convs} == {7} and merged.calls == 42
    assert merged.unkeyed == [Unkeyed("its tensors are not on a CUDA device", 2)]
    for c in merged.convs:  # each key comes with the problem and direction tune explores
        assert native_key_of(c.problem, c.direction) == c.key and not c.why
    path = tmp_path / "convs.json"
    path.write_text(merged.to_json())
    assert read_convs(str(path)) == merged
    again = merge_records([merged, _part(13, 1)])
    assert again.processes == 3 and again.calls == 48
    # a misses file: one part per line, appended by each process
    misses = tmp_path / "plans.json.misses"
    misses.write_text(_part(1, 2).to_json(indent=None) + "\n" + _part(2, 5).to_json(None) + "\n")
    assert read_convs(str(misses)).calls == 42
    # a process stopped while appending its part: the line is named, the file left alone
    good = _part(1, 2).to_json(indent=None)
    for text, n in ((good + "\n\n" + good + "\n" + good[:57] + "\n", 4),
                    (good[:57] + "\n" + good + "\n", 1)):
        misses.write_text(text)
        with pytest.raises(UserError, match=rf"plans.json.misses': line {n}: not valid JSON: "
                                            r".*\(a process stopped while appending it\? "
                                            r"remove that line\)$"):
            read_convs(str(misses))


def test_record_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "cudnn_explorer.plans", "schema_version": 1}))
    with pytest.raises(UserError, match="record file '.*bad.json': not a cudnn_explorer "
                                        "record file: schema is \"cudnn_explorer.plans\""):
        read_convs(str(bad))
    d = merge_records([_part(1, 1)]).to_dict()
    d["convs"][0]["calls"] = -1
    bad.write_text(json.dumps(d))
    with pytest.raises(UserError, match=r"convs\[0\].calls: -1 is not an integer >= 0"):
        read_convs(str(bad))
    merged = merge_records([ConvRecord(convs=[RecordedConv(key=[1, 0], description="x")])])
    assert merged.convs[0].problem is None and merged.convs[0].why == \
        "key [1, 0]: not a list of integers in the op's key order"


def _direction(key, covered, pinned, fallback, reason=""):
    return PinnedDirection(key=key, description=f"fwd of {key}", covered=covered,
                           pinned_calls=pinned, fallback_calls=fallback, reason=reason)


def test_exit_line_and_report_merge():
    a = RunReport(counts=PinCounts([_direction([1, 1], True, 12000, 0),
                                    _direction([1, 2], False, 0, 30, "not covered")]), pid=1)
    b = RunReport(counts=PinCounts([_direction([1, 1], True, 345, 0),
                                    _direction([1, 3], False, 0, 25, "not covered")]), pid=2)
    merged = merge_reports([a, b])
    assert merged.processes == 2
    assert exit_line(merged) == ("cudnn_explorer: 12,345 of 12,400 convolution calls ran pinned "
                                 "plans; 55 fell back (2 problem-directions not in the file)")
    cpu = RunReport(counts=PinCounts([_direction([], False, 0, 3, "its tensors are not on a "
                                                                   "CUDA device")]))
    assert exit_line(cpu).endswith("0 of 3 convolution calls ran pinned plans; 3 fell back "
                                   "(3 calls: its tensors are not on a CUDA device)")
    assert exit_line(RunReport(not_loaded="gone")).endswith("the plan file was not loaded (gone)")
    assert RunReport.read(json.dumps(merged.to_dict())) == merged


def test_pth_file_is_the_hook_line():
    with open(os.path.join(ROOT, "cudnn_explorer_hook.pth")) as f:
        assert f.read() == PTH_LINE + "\n"


def test_an_installed_package_carries_its_start_up_hook():
    """setup.py's Note [the start-up hook's .pth]: pip's install (a wheel, or editable with
    -e, as scripts/setup.sh does) puts the hook's .pth in site-packages."""
    from importlib import metadata

    from cudnn_explorer.cli.hook import hook_path

    try:
        files = metadata.files("cudnn_explorer") or []
    except metadata.PackageNotFoundError:
        pytest.skip("cudnn_explorer is not installed here (run from the source tree)")
    assert "cudnn_explorer_hook.pth" in [str(f) for f in files]
    with open(hook_path()) as f:
        assert f.read() == PTH_LINE + "\n"


@pytest.fixture
def hooked(tmp_path):
    """An environment whose every Python process runs the .pth line, as an installed
    hook would (a sitecustomize on PYTHONPATH adds a site dir holding the .pth)."""
    site_dir, boot = tmp_path / "site", tmp_path / "boot"
    site_dir.mkdir()
    boot.mkdir()
    (site_dir / "cudnn_explorer_hook.pth").write_text(PTH_LINE + "\n")
    (boot / "sitecustomize.py").write_text(f"import site\nsite.addsitedir({str(site_dir)!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_EXPLORER_")}
    env["PYTHONPATH"] = os.pathsep.join([str(boot), ROOT])
    return env


def _python(code, env, timeout=120):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=timeout)


LOADED = "import sys; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
         "('torch', 'cudnn_explorer')))"


def test_hook_costs_nothing_unset(hooked):
    r = _python(LOADED, hooked)
    assert r.returncode == 0 and r.stdout.strip() == "[]", r.stderr
    # set, it still imports no torch itself: only the lean package and the hook
    r = _python(LOADED, dict(hooked, CUDNN_EXPLORER_RECORD="/nonexistent"))
    loaded = eval(r.stdout)
    assert "cudnn_explorer.pinning.startup" in loaded and not [m for m in loaded if "torch" in m]


TRAIN = """
import torch, torch.nn.functional as F
m = torch.nn.Conv2d(3, 4, 3)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for i in range(6):
    (m(torch.randn(2, 3, 8, 8)).sum() + F.conv2d(torch.randn(1, 3, 5, 5), m.weight).sum()).backward()
    opt.step()
    print("step", i, flush=True)
"""


def test_bad_variable_runs_the_program(hooked, tmp_path):
    r = _python(TRAIN, dict(hooked, CUDNN_EXPLORER_PLANS="p.json", CUDNN_EXPLORER_STRICT="maybe"))
    assert r.returncode == 0 and "step 5" in r.stdout
    assert r.stderr.strip() == ("cudnn_explorer: CUDNN_EXPLORER_STRICT=\"maybe\": valid: 0 or 1; "
                                "the program runs without cudnn_explorer")


def test_missing_plan_file_bare(hooked, tmp_path):
    missing = str(tmp_path / "none.json")
    r = _python(TRAIN, dict(hooked, CUDNN_EXPLORER_PLANS=missing))
    assert r.returncode == 0 and "step 5" in r.stdout, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0] == (f"cudnn_explorer: CUDNN_EXPLORER_PLANS: plan file '{missing}': No such "
                        f"file or directory; running unpinned")
    assert lines[-1].startswith("cudnn_explorer: 0 of ") and "was not loaded" in lines[-1]
    r = _python(TRAIN, dict(hooked, CUDNN_EXPLORER_PLANS=missing, CUDNN_EXPLORER_STRICT="1"))
    assert r.returncode == 2 and "step" not in r.stdout
    assert r.stderr.strip().endswith("(CUDNN_EXPLORER_STRICT=1: stopping)")


def _cli(*args, env, timeout=240):
    return subprocess.run([sys.executable, "-m", "cudnn_explorer", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_record_steps_and_failure(hooked, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN + "import sys; sys.exit(7)\n")
    out = tmp_path / "convs.json"
    r = _cli("record", "-o", str(out), "--steps", "2", "--", sys.executable, str(script),
             env=hooked)
    assert r.returncode == 0, r.stderr
    assert "step 0" in r.stdout and "step 1" not in r.stdout  # its 2nd step stops it
    rec = read_convs(str(out))
    assert rec.processes == 1 and rec.steps == 2 and rec.unkeyed[0].calls > 0
    r = _cli("record", "-o", str(out), "--", sys.executable, str(script), env=hooked)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"cudnn_explorer: error: --out '{out}': exists; --force replaces it")
    r = _cli("record", "-o", str(out), "--force", "--", sys.executable, str(script), env=hooked)
    assert r.returncode == 7
    assert r.stderr.strip().splitlines()[-1] == ("cudnn_explorer: the command exited 7; the "
                                                 "record holds what ran before")
    assert read_convs(str(out)).steps == 6


def test_a_python_without_the_hook_is_refused_before_the_script_runs(tmp_path):
    """Note [the hook checked first]: a Python the hook does not reach (here the base
    interpreter under another name, with no site dir holding the .pth) gets one line and
    exit 2 from record and run, and its script never starts; a command that is no Python
    is not probed."""
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.jobs import zero_code as jobs

    bare = tmp_path / "python3"
    bare.symlink_to(os.path.realpath(sys.executable))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_EXPLORER_")}
    env["PYTHONPATH"] = ROOT
    env["CUDNN_EXPLORER_RECORD"] = str(tmp_path / "rec")  # as record sets it for the probe
    ran = tmp_path / "ran"
    script = tmp_path / "train.py"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from tests.pinning_helpers import entry

    plans = tmp_path / "plans.json"
    plans.write_text(PlanFile(environment=PlanEnvironment(), entries=[
        entry(PROBLEMS[3], "fwd", "ConvFwd_eng0")]).to_json())
    for verb in (["record", "-o", str(tmp_path / "convs.json")], ["run", "--plans", str(plans)]):
        r = _cli(*verb, "--", str(bare), str(script), env=env)
        assert r.returncode == 2 and not ran.exists(), r.stderr
        line = r.stderr.strip().splitlines()
        assert len(line) == 1 and "hook does not run in" in line[0] and "hook install" in line[0]
    with pytest.raises(UserError, match="does not run in"):
        jobs._check_hook([str(bare), str(script)], env)
    jobs._check_hook(["true", str(script)], env)  # no Python: not probed, nothing raised
    # a console script (torchrun's kind) or ./train.py names its Python on its #! line:
    # a launcher may start another Python (conda run), so a no there is a warning only
    launcher = tmp_path / "launch"
    launcher.write_text(f"#!{bare}\nimport sys\n")
    launcher.chmod(0o755)
    warning = jobs._check_hook([str(launcher)], env)
    assert f"'{bare}', which '{launcher}' names on its #! line" in warning
    launcher.write_text(f"#!/usr/bin/env -S A=1 {bare} -u\n")
    assert jobs._python_of([str(launcher)], env) == ([str(bare), "-u"], False)
    launcher.write_text("#!/bin/sh\necho\n")
    assert jobs._python_of([str(launcher)], env) == ([], False)


def test_the_tools_own_processes_leave_the_hook_alone(hooked, tmp_path):
    """Note [the tool's own processes]: a recording exported in the shell is not the
    tool's: its run verb, which imports torch, records nothing of itself and says
    nothing of the hook; a program's process (python -c) under the same variables does."""
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from tests.pinning_helpers import entry

    plans = tmp_path / "plans.json"
    plans.write_text(PlanFile(environment=PlanEnvironment(), entries=[
        entry(PROBLEMS[3], "fwd", "ConvFwd_eng0")]).to_json())
    rec = tmp_path / "rec"
    env = dict(hooked, CUDNN_EXPLORER_RECORD=str(rec))
    r = _cli("run", "--plans", str(plans), "--", "true", env=env)
    assert r.returncode == 0, r.stderr
    assert "cudnn_explorer: internal error" not in r.stderr and not rec.exists()
    r = _python("import torch, torch.nn.functional as F; "
                "F.conv2d(torch.randn(1, 1, 3, 3), torch.randn(1, 1, 1, 1))", env)
    assert r.returncode == 0 and len(list(rec.iterdir())) == 1, r.stderr


@pytest.mark.parametrize("words,want", [
    (["-u", "t.py"], (["-u"], "script", "t.py")),
    (["-Sm", "train"], (["-S"], "m", "train")),
    (["-Sc", "pass"], (["-S"], "c", "pass")),
    (["-SW", "ignore", "t.py"], (["-S", "-W", "ignore"], "script", "t.py")),
    (["-Xdev", "-mcudnn_explorer"], (["-X", "dev"], "m", "cudnn_explorer")),
    (["--check-hash-based-pycs", "always", "--", "t.py"],
     (["--check-hash-based-pycs", "always"], "script", "t.py")),
    (["-"], ([], "-", "")), ([], ([], "", "")),
])
def test_python_command_reads_options_as_python_does(words, want):
    from cudnn_explorer.core.zero_code import python_command

    assert python_command(words) == want


def test_the_hook_never_breaks_a_program_that_empties_its_argv(hooked, tmp_path):
    r = _python("import sys; sys.argv = []; import torch; print('ok')",
                dict(hooked, CUDNN_EXPLORER_RECORD=str(tmp_path / "rec")))
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_the_probe_runs_the_commands_interpreter_options(hooked, tmp_path):
    """python -S (no site: no .pth runs) is refused where plain python passes."""
    from cudnn_explorer.core.errors import UserError
    from cudnn_explorer.jobs import zero_code as jobs

    script = str(tmp_path / "train.py")
    hooked = dict(hooked, CUDNN_EXPLORER_RECORD=str(tmp_path / "rec"))  # as record sets it
    assert jobs._check_hook([sys.executable, "-u", script], hooked) == ""
    assert jobs._python_of([sys.executable, "-X", "dev", "-S", "-m", "x"], hooked) == (
        [sys.executable, "-X", "dev", "-S"], True)
    for options in (["-S"], ["-Sm", "train"], ["-i", "-S"], ["-SW", "ignore"]):
        with pytest.raises(UserError, match="does not run in"):
            jobs._check_hook([sys.executable, *options, script], hooked)


def test_record_two_gloo_ranks_and_time_limit(hooked, tmp_path):
    script = tmp_path / "ranks.py"
    script.write_text("""
import os, sys, time, torch, torch.distributed as dist, torch.multiprocessing as mp
import torch.nn.functional as F

def rank(r):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=r,
                            world_size=2)
    for _ in range(3 + r):
        F.conv2d(torch.randn(1, 2, 6, 6), torch.randn(3, 2, 3, 3))
    dist.barrier()
    dist.destroy_process_group()

if __name__ == "__main__":
    mp.spawn(rank, nprocs=2)
    if len(sys.argv) > 2:
        F.conv1d(torch.randn(1, 2, 6), torch.randn(3, 2, 3))
        print("waiting", flush=True)
        time.sleep(600)
""")
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = tmp_path / "convs.json"
    r = _cli("record", "-o", str(out), "--", sys.executable, str(script), port, env=hooked)
    assert r.returncode == 0, r.stderr
    rec = read_convs(str(out))
    assert rec.processes == 2 and rec.unkeyed[0].calls == 7  # the parent ran none
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    r = _cli("record", "-o", str(out), "--force", "--time-limit", "40", "--", sys.executable,
             str(script), port, "wait", env=hooked, timeout=300)
    assert r.returncode == 0 and "waiting" in r.stdout, r.stderr
    assert "stopped the command after 40 s" in r.stderr
    assert read_convs(str(out)).unkeyed[0].calls == 8  # the parent's, written on SIGTERM


def test_record_and_run_lose_no_file(hooked, tmp_path):
    """A record is never replaced by an empty one (a command that failed or started no
    Python under the hook), an existing one only with --force, and no output of record or
    run may be a file the command after -- names, or the plan file."""
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from tests.pinning_helpers import entry

    out = tmp_path / "convs.json"
    out.write_text('{"precious": true}')
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    for command in ([sys.executable, str(tmp_path / "trian_typo.py")], ["false"]):
        r = _cli("record", "-o", str(out), "--force", "--", *command, env=hooked)
        assert r.returncode != 0 and out.read_text() == '{"precious": true}', r.stderr
        assert r.stderr.strip().splitlines()[-1] == (
            f"cudnn_explorer: the command exited {r.returncode} before any process "
            f"recorded: '{out}' not written")
    r = _cli("record", "-o", str(tmp_path / "new.json"), "--", "true", env=hooked)
    assert r.returncode == 2 and not (tmp_path / "new.json").exists()
    assert "imported torch under the start-up hook" in r.stderr
    r = _cli("record", "-o", str(script), "--force", "--", sys.executable, str(script),
             env=hooked)
    assert r.returncode == 2 and script.read_text() == TRAIN
    assert r.stderr.strip() == (f"cudnn_explorer: error: --out '{script}': is a file the "
                                f"command after -- names ('{script}'); writing it would lose "
                                f"it: give another --out")
    plans = tmp_path / "plans.json"
    plans.write_text(PlanFile(environment=PlanEnvironment(), entries=[
        entry(PROBLEMS[3], "fwd", "ConvFwd_eng0")]).to_json())
    before = plans.read_text()
    py = [sys.executable, str(script)]
    for args, match in ((["--report", str(script), "--", *py, f"--x={script}"],
                         "is a file the command after -- names"),
                        (["--misses", str(plans), "--", *py], "is the plan file this command reads"),
                        (["--misses", str(tmp_path), "--", *py], "is a directory"),
                        (["--report", str(tmp_path / "r.json") + os.sep, "--", *py],
                         "names a folder"),
                        (["--report", str(tmp_path / "same"), "--misses", str(tmp_path / "same"),
                          "--", *py], "one file for two outputs")):
        r = _cli("run", "--plans", str(plans), *args, env=hooked)
        assert r.returncode == 2 and match in r.stderr and len(r.stderr.splitlines()) == 1, (
            args, r.stderr)
    assert plans.read_text() == before and script.read_text() == TRAIN
    for verb in ("record", "run"):
        r = _cli(verb, "--help", env=hooked)
        assert r.returncode == 0 and r.stdout.startswith(
            f"usage: python -m cudnn_explorer {verb}"), r.stderr


def test_run_verb(hooked, tmp_path):
    from cudnn_explorer.core.plans import PlanEnvironment, PlanFile
    from tests.pinning_helpers import entry

    plans = tmp_path / "plans.json"
    plans.write_text(PlanFile(environment=PlanEnvironment(), entries=[
        entry(PROBLEMS[3], "fwd", "ConvFwd_eng0")]).to_json())
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    report = tmp_path / "report.json"
    r = _cli("run", "--plans", str(plans), "--report", str(report), "--", sys.executable,
             str(script), env=hooked)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stderr.splitlines() if "convolution calls" in ln]
    assert len(line) == 1 and line[0].startswith("cudnn_explorer: 0 of ")
    assert "(24 calls: its tensors are not on a CUDA device)" in line[0]
    assert "UserWarning" not in r.stderr, r.stderr  # the exit line says it once
    assert RunReport.read(report.read_text()).counts.fallback_calls == 24
    r = _cli("run", "--plans", str(tmp_path / "none.json"), "--", "true", env=hooked)
    assert r.returncode == 2 and r.stderr.strip() == (
        f"cudnn_explorer: error: plan file '{tmp_path / 'none.json'}': No such file or "
        f"directory")
    r = _cli("record", "-o", str(tmp_path / "c.json"), "--", sys.executable, str(script),
             env=dict(hooked, CUDNN_EXPLORER_AHEAD="lots"))
    assert r.returncode == 2 and r.stderr.strip() == (
        "cudnn_explorer: error: CUDNN_EXPLORER_AHEAD=\"lots\": valid: an integer from 0 to 64")
    r = _cli("record", "-o", str(tmp_path / "c.json"), "--", "no-such-command-here", env=hooked)
    assert r.returncode == 2 and "not found on PATH" in r.stderr


def test_stale_plan_file_when_cuda_starts(monkeypatch, capsys):
    """Note [checked when CUDA starts]: a file from another GPU is said once and unloaded
    (the run goes on unpinned), or ends the program with exit 2 under strict."""
    from cudnn_explorer.core.zero_code import Settings
    from cudnn_explorer.pinning import modules, op, zero_code

    unloaded = []
    monkeypatch.setattr(op, "load_recorder", lambda: unloaded.append(True))
    monkeypatch.setattr(modules, "_differences", lambda p: ["GPU A here, B in the file"])
    monkeypatch.setitem(zero_code._STATE, "settings", Settings(mode="run", plans="p.json"))
    monkeypatch.setitem(zero_code._STATE, "not_loaded", "")
    zero_code._check_environment()
    assert unloaded and zero_code._STATE["not_loaded"].startswith("plan file 'p.json' is from")
    assert capsys.readouterr().err == (
        "cudnn_explorer: CUDNN_EXPLORER_PLANS: plan file 'p.json' is from another environment: "
        "GPU A here, B in the file (CUDNN_EXPLORER_ALLOW_ENVIRONMENT=1 uses it anyway); "
        "running unpinned\n")
    monkeypatch.setitem(zero_code._STATE, "settings", Settings(mode="run", plans="p.json",
                                                               strict=True))
    monkeypatch.setitem(zero_code._STATE, "done", False)
    with pytest.raises(SystemExit) as e:
        zero_code._check_environment()
    assert e.value.code == 2
