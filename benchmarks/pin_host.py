"""What does a pinned convolution cost on the host per call, against PyTorch's own, when
pinned by pin() and by the zero-code hook, and while the hook records?

``python -m benchmarks.pin_host [--calls 3000] [--repeats 3]``: first the plan file of a
tiny problem (1x8x8x8 float16 channels_last, 3x3, 8 out: launch-bound), as a user makes
it (``python -m cudnn_explorer --shape 1,8,8,8 --out-channels 8 --kernel 3 --dtype float16
--layout nhwc --no-store --json FILE``, ``plans write FILE -o PLANS``). Then, in fresh
processes, in turns: ATen; pinned by ``cudnn_explorer.pin``; pinned by the start-up hook
(``CUDNN_EXPLORER_PLANS``: every functional convolution routed, as ``run`` does); and
recorded by the hook (``CUDNN_EXPLORER_RECORD``: each call counted and its layer named, as
``record`` does). Each times an ``nn.Conv2d`` called without gradients, and a training
call (forward with autograd, backward to the input and the weight: three cuDNN
directions); each the best of 5 blocks of ``--calls`` calls, µs per call; a pinned
mode's process fails where any call fell back. Goal (docs/pinning.md): pinned at most
ATen's.
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
PROBLEM = ["--shape", "1,8,8,8", "--out-channels", "8", "--kernel", "3", "--dtype", "float16",
           "--layout", "nhwc"]
MODES = ("aten", "pinned", "pinned by the hook", "recorded by the hook")
# mode: the start-up hook's variables it runs under ({out}: the run's own file); every
# mode sets both of the hook's switches, so a shell's own leave no mode routed unasked.
# Pinned by the hook as pin() is by default: not strict (strict mode adds its coverage
# check to every call; a call that falls back fails the run all the same, below), and
# nothing kept beside the plan file.
_OFF = (("CUDNN_EXPLORER_PLANS", ""), ("CUDNN_EXPLORER_RECORD", ""))
HOOK_ENV = {"aten": _OFF, "pinned": _OFF,
            "pinned by the hook": (("CUDNN_EXPLORER_PLANS", "{plans}"),
                                   ("CUDNN_EXPLORER_RECORD", ""),
                                   ("CUDNN_EXPLORER_STRICT", ""), ("CUDNN_EXPLORER_KEEP", "0")),
            "recorded by the hook": (("CUDNN_EXPLORER_PLANS", ""),
                                     ("CUDNN_EXPLORER_RECORD", "{out}.record"))}
PINNED = ("pinned", "pinned by the hook")
FIGURES = [Figure("nograd_us", "nn.Conv2d, no gradients", "µs"),
           Figure("train_us", "nn.Conv2d, forward and backward", "µs")]
BENCH = harness.Benchmark("pin_host", QUESTION, FIGURES, baseline="aten")


def plan_file() -> str:
    folder = tempfile.mkdtemp(prefix="bench_pin_host_")
    found, plans = os.path.join(folder, "tiny.json"), os.path.join(folder, "plans.json")
    for cmd in ([*PROBLEM, "--no-store", "--quiet", "--json", found],
                ["plans", "write", found, "-o", plans]):
        subprocess.run([sys.executable, "-m", "cudnn_explorer", *cmd], check=True,
                       stdout=sys.stderr)
    return plans


def per_call_us(torch, fn, calls: int, blocks: int = 5) -> float:
    """The best of ``blocks`` blocks of ``calls`` back-to-back calls, µs per call."""
    best = float("inf")
    for _ in range(blocks):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / calls * 1e6)
    return best


def child(a) -> int:
    import json

    if a.child.endswith("by the hook"):  # as the installed hook would (a no-op where it ran)
        from cudnn_explorer.pinning import startup

        startup.install()
    import torch

    import cudnn_explorer

    conv = torch.nn.Conv2d(8, 8, 3, padding=1).cuda().half() \
        .to(memory_format=torch.channels_last)
    x = torch.randn(1, 8, 8, 8, device="cuda", dtype=torch.float16) \
        .contiguous(memory_format=torch.channels_last)
    xg = x.clone().requires_grad_(True)
    if a.child == "pinned":
        cudnn_explorer.pin(conv, a.plans, keep=False)

    def nograd():
        with torch.no_grad():
            conv(x)

    def train():
        conv(xg).sum().backward()

    figures = {"nograd_us": per_call_us(torch, nograd, a.calls),
               "train_us": per_call_us(torch, train, max(a.calls // 10, 1))}
    if a.child in PINNED:  # a pinned mode's figures are of pinned calls, or of nothing
        from cudnn_explorer.pinning import op

        counts = op.pin_counts()
        if counts.fallback_calls or not counts.pinned_calls:
            print(f"pin_host: {a.child}: {counts.fallback_calls} of {counts.calls} calls fell "
                  f"back to PyTorch's convolution; no figures", file=sys.stderr)
            return 1
    with open(a.out, "w") as f:
        json.dump(figures, f)
    return 0


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/pin_host.json", repeats=3)
    ap.add_argument("--calls", type=int, default=3000, help="calls a block (default 3000)")
    ap.add_argument("--plans", default=None, help="the tiny problem's plan file")
    harness.child_args(ap, MODES)
    return ap.parse_args(argv)


def cases(a, plans: str) -> list:
    return [Case("1x8x8x8 fp16 nhwc 3x3", m, harness.module_argv(
        __spec__.name, "--child", m, "--calls", str(a.calls), "--plans", plans, "--out",
        "{out}"), env=tuple((k, v.replace("{plans}", plans)) for k, v in HOOK_ENV[m]))
        for m in MODES]


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.child:
        return child(a)
    plans = a.plans or plan_file()
    return BENCH.run(cases(a, plans), a, runner, env)


if __name__ == "__main__":
    sys.exit(main())
