"""What do PyTorch's first calls of a convolution cost in each cuDNN mode, and how much of
it depends on a CUDA JIT cache that a run before filled?

``python -m benchmarks.first_calls [--shape 32,3,224,224] [--kernel 3] [--out-channels
64] [--dtype float32] [--repeats 3]``: every mode (benchmark on, off, deterministic) in a
fresh process, in turns. Each process loads cuDNN with a tiny convolution, then times its
first forward and first backward call of the problem (synchronised). Row "empty cache":
every process its own empty ``CUDA_CACHE_PATH``; row "shared cache": a repeat's processes
share one, so a mode may reuse what a mode before it compiled (the order turns every
repeat). The problem command's verdict "benchmark mode cost N ms once" is benchmark's
first calls less the heuristics mode's.
"""
import argparse
import json
import sys
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
MODES = ("heuristic", "benchmark", "deterministic")
FIGURES = [Figure("fwd_ms", "first forward call", "ms"),
           Figure("bwd_ms", "first backward call (both gradients)", "ms")]
BENCH = harness.Benchmark("first_calls", QUESTION, FIGURES, baseline="heuristic")


def child(a) -> int:
    import torch

    torch.backends.cudnn.benchmark = a.child == "benchmark"
    torch.backends.cudnn.deterministic = a.child == "deterministic"
    dtype = getattr(torch, a.dtype)
    tiny = torch.ones(1, 1, 4, 4, device="cuda")
    torch.nn.functional.conv2d(tiny, torch.ones(1, 1, 1, 1, device="cuda"))
    shape = [int(s) for s in a.shape.split(",")]
    x = torch.randn(*shape, device="cuda", dtype=dtype, requires_grad=True)
    w = torch.randn(a.out_channels, shape[1], a.kernel, a.kernel, device="cuda", dtype=dtype,
                    requires_grad=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    y = torch.nn.functional.conv2d(x, w, padding=a.kernel // 2)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    y.backward(torch.ones_like(y))
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    with open(a.out, "w") as f:
        json.dump({"fwd_ms": (t1 - t0) * 1e3, "bwd_ms": (t2 - t1) * 1e3}, f)
    return 0


def cases(a) -> list:
    args = ["--shape", a.shape, "--kernel", str(a.kernel), "--out-channels",
            str(a.out_channels), "--dtype", a.dtype, "--out", "{out}"]
    return [Case(row, m, harness.module_argv(__spec__.name, "--child", m, *args),
                 env=(("CUDA_CACHE_PATH", cache),))
            for row, cache in (("empty cache", "{tmp}"), ("shared cache", "{round}"))
            for m in MODES]


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/first_calls.json", repeats=3)
    ap.add_argument("--shape", default="32,3,224,224", help="N,C,H,W")
    ap.add_argument("--kernel", type=int, default=3)
    ap.add_argument("--out-channels", type=int, default=64)
    ap.add_argument("--dtype", default="float32", choices=("float32", "float16", "bfloat16"))
    harness.child_args(ap, MODES)
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.child:
        return child(a)
    return BENCH.run(cases(a), a, runner, env)


if __name__ == "__main__":
    sys.exit(main())
