"""Shared markers: GPU tests skip with a reason where there is no GPU or no extension.

Nothing here touches the GPU at import or collection time: the checks run lazily,
once, when a marked test is about to run.
"""
import functools
import os
import signal
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tiny_factory(tmp_path, monkeypatch, name: str, convs: int = 2):
    """A module ``name`` in ``tmp_path`` whose ``tiny()`` builds a Conv2d 3->8, a ReLU and
    ``convs`` - 1 Conv2d 8->8 (3x3, padding 1): importable here and by the child processes
    (PYTHONPATH), and imported anew (not a module of that name another test imported)."""
    import importlib

    more = "".join(",\n        torch.nn.Conv2d(8, 8, 3, padding=1)" for _ in range(convs - 1))
    (tmp_path / f"{name}.py").write_text(
        "import torch\n"
        "def tiny():\n"
        "    return torch.nn.Sequential(\n"
        f"        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(){more})\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path) + os.pathsep + os.environ.get(
        "PYTHONPATH", ""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)
    return importlib.import_module(name)


def pytest_configure(config):
    # The default results store of every CLI run in the tests: a fresh one per session, so
    # that no test answers from a store another session (or the user) filled.
    import tempfile

    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="cudnn_explorer_tests_")
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU and the built extension")
    config.addinivalue_line("markers", "ext: needs the built extension (no GPU needed)")
    config.addinivalue_line("markers", "gpu_alone: holds most of the GPU's memory, or times "
                                       "against a fixed bar, so it runs only where no other "
                                       "test shares the GPU")


def pytest_runtest_logreport(report):
    # CE_TEST_TIMES=PATH (scripts/gpu_check.sh): each test's outcome and seconds, appended
    # as it ends, with the wall clock, so a run cut short still tells where time went.
    path = os.environ.get("CE_TEST_TIMES")
    if path and (report.when == "call" or report.outcome != "passed"):
        import time

        with open(path, "a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {report.when:8} {report.outcome:7} "
                    f"{report.duration:7.1f} s  {report.nodeid}\n")


@functools.lru_cache(maxsize=None)
def ext_missing_reason():
    try:
        from cudnn_explorer.measure import native as _native

        _native.load()
    except Exception as e:  # noqa: BLE001
        return f"native extension not available: {e}"
    return None


@functools.lru_cache(maxsize=None)
def gpu_missing_reason():
    r = ext_missing_reason()
    if r:
        return r
    try:
        from cudnn_explorer.measure import native as _native

        _native.require_gpu(0)
    except Exception as e:  # noqa: BLE001
        return str(e)
    return None


def parallel_workers() -> int:
    """How many pytest-xdist workers share this machine (1 without ``-n``)."""
    return int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu"):
        r = gpu_missing_reason()
        if r:
            pytest.skip(r)
        workers = parallel_workers()
        if item.get_closest_marker("gpu_alone") and workers > 1:
            # Note [tests that hold the GPU]: a test that holds all but 2 GiB of the GPU
            # starves the tests beside it (out-of-memory failures in theirs) and they
            # starve it; scripts/gpu_check.sh runs these alone after the others.
            pytest.skip(f"holds most of the GPU's memory or times against a fixed bar: "
                        f"run alone, not among {workers} parallel workers (pytest -n)")
    elif item.get_closest_marker("ext"):
        r = ext_missing_reason()
        if r:
            pytest.skip(r)


requires_cuda = pytest.mark.gpu
requires_ext = pytest.mark.ext


@pytest.fixture(autouse=True)
def driver_may_have_a_gpu(monkeypatch):
    """In-process tests fake the GPU (FakeBench, fake mode processes, monkeypatched
    environments) on machines without one: the driver's quick "no GPU here"
    (measure/driver.py, asked before any process starts) is left to torch's own check,
    as it was before that probe existed. Subprocess runs (run_cli) ask the real driver;
    tests of the probe itself use the function (driver.no_gpu_reason) they imported."""
    from cudnn_explorer.measure import driver

    monkeypatch.setattr(driver, "no_gpu_reason", lambda *a, **k: None)


def run_cli(*args, env=None, timeout=300):
    """Run ``python -m cudnn_explorer`` as a subprocess; returns CompletedProcess. One that
    outlives ``timeout`` fails the test with where every thread of it was waiting (its
    faulthandler's dump on SIGABRT), so that a hang says where it hung."""
    e = dict(os.environ)
    e.pop("CUDNN_EXPLORER_DEBUG", None)
    e["PYTHONFAULTHANDLER"] = "1"
    if env:
        e.update(env)
    cmd = [sys.executable, "-m", "cudnn_explorer", *args]
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, env=e) as p:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGABRT)
            try:
                out, err = p.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                out, err = p.communicate()
            pytest.fail(f"python -m cudnn_explorer {' '.join(args)} did not end within "
                        f"{timeout} s; where it waited:\n{err[-6000:]}", pytrace=False)
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)
