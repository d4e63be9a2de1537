"""The environment cache: a repeat answered from the results store without torch or a GPU,
and every change that could alter the environment misses the cache."""
import dataclasses
import io
import os
from contextlib import redirect_stderr, redirect_stdout

import pytest

from cudnn_explorer.core.errors import MissingDependencyError
from cudnn_explorer.measure import envcache
from fakes import ENV


@pytest.fixture
def proc(tmp_path, monkeypatch):
    """A fake /proc/driver/nvidia with two GPUs; returns its folder."""
    root = tmp_path / "nvidia"
    for bus in ("0000:19:00.0", "0000:3b:00.0"):
        (root / "gpus" / bus).mkdir(parents=True)
        (root / "gpus" / bus / "information").write_text(
            f"Model: NVIDIA H200\nGPU UUID: GPU-{bus}\nBus Location: {bus}\n")
    (root / "version").write_text("NVRM version: NVIDIA UNIX x86_64 Kernel Module 580.159.04\n")
    monkeypatch.setattr(envcache, "_PROC", str(root))
    return root


def test_no_driver_means_no_fingerprint(tmp_path, monkeypatch):
    monkeypatch.setattr(envcache, "_PROC", str(tmp_path / "absent"))
    assert envcache.fingerprint(0) is None
    assert envcache.cached_environment(0, str(tmp_path)) is None


@pytest.mark.ext  # the fingerprint reads the extension's file
def test_the_fingerprint_changes_with_what_the_environment_depends_on(proc, tmp_path,
                                                                      monkeypatch):
    libs = tmp_path / "libs"
    libs.mkdir()
    (libs / "libcudnn.so.9").write_bytes(b"x" * 10)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(libs))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # whatever the caller had set
    fp = envcache.fingerprint(0)
    assert fp and fp == envcache.fingerprint(0)  # stable
    assert envcache.fingerprint(1) != fp  # another device index
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # another GPU behind index 0
    assert envcache.fingerprint(0) != fp
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert envcache.fingerprint(0) == fp
    (libs / "libcudnn.so.9").write_bytes(b"y" * 11)  # a cuDNN library replaced
    fp2 = envcache.fingerprint(0)
    assert fp2 != fp
    (proc / "version").write_text("NVRM version: 590.1\n")  # another driver
    assert envcache.fingerprint(0) not in (fp, fp2)


@pytest.mark.ext  # the fingerprint reads the extension's file
def test_remember_then_read_back_only_for_the_same_fingerprint(proc, tmp_path, monkeypatch):
    where = str(tmp_path / "cache")
    env = dataclasses.replace(ENV, device_index=0)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)  # whatever the caller had set
    assert envcache.cached_environment(0, where) is None
    envcache.remember(env, where)
    assert envcache.cached_environment(0, where) == env
    assert envcache.cached_environment(1, where) is None
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert envcache.cached_environment(0, where) is None
    monkeypatch.delenv("CUDA_DEVICE_ORDER")
    (path,) = [os.path.join(where, f) for f in os.listdir(where)]
    with open(path, "w") as f:
        f.write("{not json")
    assert envcache.cached_environment(0, where) is None  # a bad copy is no copy
    os.chmod(where, 0o500)
    try:
        envcache.remember(env, where)  # an unwritable cache is skipped, silently
    finally:
        os.chmod(where, 0o700)


@pytest.mark.ext  # the fingerprint reads the extension's file
def test_a_repeat_is_answered_from_the_store_without_the_gpu(proc, tmp_path, monkeypatch):
    from cudnn_explorer import cli
    from cudnn_explorer.jobs import lazy_measure
    from cudnn_explorer.measure import pipeline
    from fakes import FakeBench

    bench = FakeBench(tmp_path, monkeypatch)
    monkeypatch.setattr(pipeline, "GpuBench", lambda device: bench)  # the job's bench
    monkeypatch.setattr(pipeline, "environment", lambda device=0: bench.environment())
    monkeypatch.setattr(lazy_measure, "frontend_built", lambda device: True)
    argv = ["--shape", "8,64,28,28", "--dtype", "float16", "--layout", "nhwc", "--direction",
            "fwd", "--budget-ms", "5", "--child-timeout", "30", "--engine-budget-s", "30",
            "--store", str(tmp_path / "s.db")]

    def run():
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(argv)
        return code, out.getvalue(), err.getvalue()

    code, first, _ = run()
    assert code == 0

    def no_gpu(device=0):
        raise MissingDependencyError("no GPU here")

    monkeypatch.setattr(pipeline, "environment", no_gpu)  # the GPU is not asked again
    code, again, err = run()
    assert code == 0 and "answered from the results store" in err, err
    assert again.split("\n", 2)[2] == first.split("\n", 2)[2]
    (proc / "version").write_text("NVRM version: 590.1\n")  # a new driver: asked again
    code, _, err = run()
    assert code == 3 and "no GPU here" in err
