"""The CLI as a subprocess: every user mistake is one line on stderr, exit code 2."""
import json
import subprocess
import sys

import pytest

from conftest import REPO, gpu_missing_reason, run_cli
from fakes import exploration

BAD = [
    (["--shape", "32,3,abc"], "'abc' is not an integer"),
    (["--shape", "32,3"], "expected N,C,L"),
    (["--shape", "0,3,8,8"], "N must be >= 1"),
    (["--shape", "1,3,4,4", "--kernel", "9", "--padding", "0"], "--kernel 9 in H"),
    (["--shape", "1,3,8,8", "--groups", "2"], "--groups 2"),
    (["--shape", "1,3,8,8", "--dtype", "int8"], "--dtype 'int8'"),
    (["--shape", "1,3,8,8", "--layout", "chwn"], "--layout 'chwn'"),
    (["--shape", "1,3,8,8", "--tf32", "maybe"], "--tf32 'maybe'"),
    (["--shape", "1,3,8,8", "--direction", "up"], "--direction up: valid: fwd, bwd-data, bwd-filter or all"),
    (["--shape", "1,3,8,8", "--device", "x"], "--device x: valid: a CUDA device index >= 0"),
    (["--shape", "1,3,8,8", "--max-workspace", "lots"], "--max-workspace lots: valid"),
    (["--shape", "1,3,8,8", "--max-workspace", "-5"], "--max-workspace -5: valid: a number of MiB from 0 to"),
    (["--kernel", "3"], "--shape is required"),
    (["--shape", "1,3,8,8", "--benchmark-limit", "-1"], "--benchmark-limit -1: valid: an integer >= 0"),
    (["--shape", "1,3,8,8", "--benchmark-limit", "ten"], "--benchmark-limit ten: valid"),
    (["--shape", "1,3,8,8", "--child-timeout", "soon"], "--child-timeout soon: valid"),
    (["--shape", "1,3,8,8", "--engine-configs", "0"], "--engine-configs 0: valid: an integer from 1 to 10000"),
    (["--shape", "1,3,8,8", "--profile", "deep"], "--profile deep: valid: quick, thorough"),
    (["--load", "x.json", "--profile", "thorough"], "--profile would be"),
    (["--shape", "1,3,8,8", "--engine-budget-s", "-3"], "--engine-budget-s -3"),
    (["--shape", "1,3,8,8", "--budget-ms", "fast"], "--budget-ms fast: valid"),
    (["--frobnicate"], "unrecognized arguments: --frobnicate"),
    (["--shape", "1,3,8,8", "--engines", "--no-engines"], "not allowed with argument"),
    (["--load", "/nonexistent/x.json"], "--load '/nonexistent/x.json'"),
    (["--load", ""], "--load '': give a saved file's path"),
    (["--shape", "1,3,8,8", "--json", ""], "--json '': give a file's path"),
    (["--shape", "1,3,8,8", "--json", "x.json/"], "--json 'x.json/': names a folder"),
    (["--shape", "1,3,8,8", "--json", "x" * 300 + ".json"], "bytes; valid: at most"),
]


@pytest.mark.parametrize("args,match", BAD)
def test_bad_input_is_one_line_exit_2(args, match):
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("cudnn_explorer: error: ") and match in lines[0]
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_debug_shows_traceback():
    r = run_cli("--shape", "32,3,abc", "--debug")
    assert r.returncode != 0 and "Traceback" in r.stderr


def test_load_renders_saved_json_without_gpu(tmp_path):
    f = tmp_path / "r.json"
    f.write_text(exploration().to_json())
    r = run_cli("--load", str(f))
    assert r.returncode == 0, r.stderr
    assert "IMPLICIT_PRECOMP_GEMM" in r.stdout and "Find ms" in r.stdout
    r = run_cli("--load", str(f), "--json")
    assert json.loads(r.stdout) == json.loads(exploration().to_json())
    r = run_cli("--load", str(f), "--csv")
    assert r.stdout.splitlines()[0].startswith("schema_version,kind,direction,rank")


def test_json_gz_is_written_compressed_and_loads_like_json(tmp_path):
    import gzip

    f = tmp_path / "r.json"
    f.write_text(exploration().to_json())
    gz = tmp_path / "r.json.gz"
    r = run_cli("--load", str(f), "--json", str(gz))
    assert r.returncode == 0, r.stderr
    raw = gz.read_bytes()
    assert raw[:2] == b"\x1f\x8b"
    assert json.loads(gzip.decompress(raw)) == json.loads(exploration().to_json())
    plain, packed = run_cli("--load", str(f)), run_cli("--load", str(gz))
    assert packed.returncode == 0 and packed.stdout == plain.stdout
    # the same result gives the same bytes (no time stamp inside)
    again = tmp_path / "again.json.gz"
    run_cli("--load", str(f), "--json", str(again))
    assert again.read_bytes() == raw


@pytest.mark.parametrize("data,match", [
    (b"\x1f\x8bgarbage", "not a valid gzip file"),
    (None, "not a valid gzip file"),  # a truncated one
])
def test_bad_gzip_is_one_line_exit_2(tmp_path, data, match):
    import gzip

    if data is None:
        data = gzip.compress(exploration().to_json().encode())[:-40]
    f = tmp_path / "bad.json.gz"
    f.write_bytes(data)
    for args in (["--load", str(f)], ["model", "--load", str(f)]):
        r = run_cli(*args)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, r.stderr
        assert lines[0] == f"cudnn_explorer: error: --load '{f}': " + lines[0].split(": ", 3)[3]
        assert match in lines[0] and "Traceback" not in r.stderr


def test_load_rejects_foreign_json(tmp_path):
    f = tmp_path / "r.json"
    f.write_text('{"schema": "something-else"}')
    r = run_cli("--load", str(f))
    assert r.returncode == 2 and "not a cudnn_explorer result" in r.stderr


def test_import_is_lean():
    code = ("import sys, cudnn_explorer; "
            "bad = [m for m in ('torch', 'cudnn_explorer._C', 'tabulate') if m in sys.modules]; "
            "print(bad); assert not bad")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_gpu_is_one_line_exit_3():
    if gpu_missing_reason() is None:
        # Hide the GPU so that the no-GPU path runs here too.
        r = run_cli("--shape", "1,3,8,8", env={"CUDA_VISIBLE_DEVICES": ""})
    else:
        r = run_cli("--shape", "1,3,8,8")
    assert r.returncode == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert ("GPU" in lines[0]) or ("cudnn_explorer._C" in lines[0])


def test_info_runs_without_gpu():
    r = run_cli("--info", env={"CUDA_VISIBLE_DEVICES": ""})
    if "cudnn_explorer._C cannot be loaded" in r.stderr:
        assert r.returncode == 3 and "pip install --no-build-isolation" in r.stderr
        return
    assert r.returncode == 0, r.stderr
    assert "extension built against" in r.stdout and "cuDNN" in r.stdout
    assert "GPU: none usable" in r.stdout


def test_harmless_flags_are_taken_where_they_change_nothing(tmp_path):
    """--quiet (or --verbose) with --load, or with model --capture-only, changes nothing
    asked for: it is taken, not refused as 'would be ignored' (scripts always pass it)."""
    f = tmp_path / "r.json"
    f.write_text(exploration().to_json())
    r = run_cli("--load", str(f), "--quiet")
    assert r.returncode == 0 and "IMPLICIT_PRECOMP_GEMM" in r.stdout, r.stderr
    (tmp_path / "onenet.py").write_text("import torch\n"
                                        "def net():\n"
                                        "    return torch.nn.Conv2d(3, 4, 3)\n")
    env = {"CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(tmp_path)}
    r = run_cli("model", "--model", "onenet:net", "--input", "3x8x8", "--batch", "2",
                "--capture-only", "--quiet", env=env)
    assert r.returncode == 0 and "1 unique problem" in r.stdout, r.stderr
    # a flag that would change what was asked for is still refused
    r = run_cli("model", "--model", "onenet:net", "--capture-only", "--budget-ms", "5", env=env)
    assert r.returncode == 2 and "--budget-ms would be ignored" in r.stderr
    r = run_cli("--load", str(f), "--quiet", "--verbose")
    assert r.returncode == 2 and "--verbose would be ignored: --quiet" in r.stderr


@pytest.mark.parametrize("argv,staged", [([], True), (["--profile", "quick"], True),
                                         (["--profile", "THOROUGH"], False)])
def test_the_profile_picks_the_staged_search_or_the_full_one(argv, staged):
    """quick (the default) is the staged search, thorough times every config in full; a
    model's quick stages too, and narrows the configs and budgets, and a flag the user
    gives wins."""
    from cudnn_explorer.cli import explore, model
    from cudnn_explorer.cli.groups import options_from_args

    a = explore.build_parser().parse_args(["--shape", "1,3,8,8", *argv])
    opts = options_from_args(a, engines=True)
    assert opts.staged is staged and opts.engine_sampling and opts.budget_ms == 100.0
    m = model.build_parser().parse_args(["resnet18", "--budget-ms", "7", *argv])
    mo = options_from_args(m, engines=True).profiled(m.profile, ("budget_ms",), model=True)
    assert mo.staged is staged and mo.budget_ms == 7.0
    assert mo.engine_sampling is not staged  # quick: only the listed configs


def test_process_age_counts_from_the_interpreters_start():
    """--verbose's "process: N s" is the process's age, imports and all: a process that
    slept 1.2 s before importing us reads at least that much."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", "import time; time.sleep(1.2); "
                          "from cudnn_explorer.cli.output import process_age_s; "
                          "print(process_age_s())"], capture_output=True, text=True, timeout=60)
    age = float(out.stdout)
    assert 1.2 <= age < 30, out


def test_a_cli_run_that_does_not_end_fails_its_test_saying_so():
    """conftest.run_cli: a command that outlives its timeout fails the test with the
    command and where it waited, instead of hanging the suite or raising TimeoutExpired."""
    with pytest.raises(pytest.fail.Exception, match=r"--help did not end within 0\.01 s"):
        run_cli("--help", timeout=0.01)


@pytest.mark.parametrize("name,code,words", [
    ("tabulate", 3, "this Python lacks 'tabulate': use .venv/bin/python (scripts/setup.sh) or pip install "
                    "tabulate"),
    ("torch.cuda", 3, "this Python lacks 'torch'"),
    ("cudnn_explorer.jobs.gone", 1, "internal error: ModuleNotFoundError"),
])
def test_a_missing_package_is_the_machines_one_line_and_ours_is_internal(monkeypatch, capsys, name,
                                                                         code, words):
    # run with a Python that lacks a dependency (the system python, not setup.sh's .venv)
    import importlib

    cli_main = importlib.import_module("cudnn_explorer.cli.main")

    def lacks(argv):
        raise ModuleNotFoundError(f"No module named '{name}'", name=name)

    monkeypatch.setattr(cli_main, "run", lacks)
    assert cli_main.main(["--shape", "1,3,8,8"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and words in err[0], err
    assert code == 1 or len(err[0]) <= 120, err  # an internal error carries its message whole


def test_debug_is_the_tools_own_flag_and_a_set_variable(monkeypatch, capsys):
    """A --debug of the command after -- (record, run) is the script's, not the tool's, and
    CUDNN_EXPLORER_DEBUG=0 is off: a user's mistake stays one line with exit 2."""
    import importlib

    cli_main = importlib.import_module("cudnn_explorer.cli.main")

    def mistake(argv):
        from cudnn_explorer.core.errors import UserError
        raise UserError("plan file 'none.json': No such file or directory")

    monkeypatch.setattr(cli_main, "run", mistake)
    monkeypatch.delenv("CUDNN_EXPLORER_DEBUG", raising=False)
    assert cli_main.main(["run", "--plans", "none.json", "--", "python", "t.py", "--debug"]) == 2
    for off in ("0", "false", "no", "off", ""):
        monkeypatch.setenv("CUDNN_EXPLORER_DEBUG", off)
        assert cli_main.main(["--shape", "1,3,8,8"]) == 2
    assert capsys.readouterr().err.count("cudnn_explorer: error: plan file") == 6
    monkeypatch.setenv("CUDNN_EXPLORER_DEBUG", "1")
    with pytest.raises(Exception, match="No such file"):
        cli_main.main(["--shape", "1,3,8,8"])
    monkeypatch.delenv("CUDNN_EXPLORER_DEBUG")
    with pytest.raises(Exception, match="No such file"):
        cli_main.main(["run", "--plans", "none.json", "--debug", "--", "python", "t.py"])


def test_host_memory_exhausted_is_the_machines_one_line(monkeypatch, capsys):
    import importlib

    cli_main = importlib.import_module("cudnn_explorer.cli.main")

    def huge(argv):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                           "can't allocate memory: you tried to allocate 239995200024 bytes.")

    monkeypatch.setattr(cli_main, "run", huge)
    assert cli_main.main(["model", "resnet18", "--image", "99999"]) == 3
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("cudnn_explorer: error: out of host memory: ")

    def python_out_of_memory(argv):
        raise MemoryError()

    monkeypatch.setattr(cli_main, "run", python_out_of_memory)
    assert cli_main.main(["--shape", "1,3,8,8"]) == 3
    assert capsys.readouterr().err.startswith("cudnn_explorer: error: out of host memory")
