"""What GPU memory does each of the tool's processes cost, and does the main job run
beside a job that leaves it little free?

``python -m benchmarks.memory [--leave-free 2048] [--repeats 1]``: rows "a CUDA context",
"after a convolution" and "with the extension imported" are fresh processes that read
their own GPU memory from nvidia-smi (what an engine worker holds at least). Row "the main
job with N MiB free": a process holds all but N MiB of the GPU, then runs the main job
(``python -m cudnn_explorer --shape 32,3,224,224 --kernel 3 --no-store --json FILE``) as
a user would and reports its exit status (0: every direction; 3: what fitted, the rest
named as skipped) and the directions it finished. Goal: exit 0 or 3, never a crash.
"""
import argparse
import json
import os
import subprocess
import sys
import time

from . import harness
from .harness import Case, Figure

QUESTION = __doc__.split("\n\n")[0].replace("\n", " ")
MIB = 2**20
COSTS = {"a CUDA context": "context", "after a convolution": "conv",
         "with the extension imported": "extension"}
FIGURES = [Figure("own_mib", "the process's GPU memory", "MiB", better=""),
           Figure("job_rc", "the main job's exit status", "", better=""),
           Figure("directions_done", "directions finished", "of 3", better=""),
           Figure("job_s", "the main job's wall time", "s")]
BENCH = harness.Benchmark("memory", QUESTION, FIGURES)


def own_mib() -> float:
    """This process's GPU memory (MiB), as nvidia-smi lists it."""
    r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    for line in r.stdout.splitlines():
        pid, used = (p.strip() for p in line.split(","))
        if pid == str(os.getpid()):
            return float(used)
    return 0.0


def cost_child(kind: str) -> dict:
    import torch

    torch.cuda.init()
    torch.zeros(1, device="cuda")
    if kind in ("conv", "extension"):
        if kind == "extension":
            import cudnn_explorer._C  # noqa: F401  (what an engine worker loads)
        x = torch.randn(1, 3, 16, 16, device="cuda", requires_grad=True)
        w = torch.randn(4, 3, 3, 3, device="cuda", requires_grad=True)
        torch.nn.functional.conv2d(x, w).sum().backward()
        torch.cuda.synchronize()
    return {"own_mib": own_mib()}


def job_child(leave_free_mib: int, out: str) -> dict:
    """Hold all but ``leave_free_mib`` of the GPU, run the main job, read what it did."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    hold = torch.empty(max(free - leave_free_mib * MIB, 0), dtype=torch.uint8, device="cuda")
    t0 = time.perf_counter()
    rc = subprocess.run([sys.executable, "-m", "cudnn_explorer", "--shape", "32,3,224,224",
                         "--kernel", "3", "--no-store", "--quiet", "--json", out],
                        stdout=sys.stderr).returncode
    figures = {"job_rc": rc, "job_s": time.perf_counter() - t0, "directions_done": 0}
    del hold
    if os.path.exists(out):
        with open(out) as f:
            doc = json.load(f)
        figures["directions_done"] = sum(1 for d in doc.get("directions", [])
                                         if not d.get("error"))
    return figures


def cases(a) -> list:
    out = [Case(row, "value", harness.module_argv(__spec__.name, "--child", kind, "--out",
                                                  "{out}"))
           for row, kind in COSTS.items()]
    out.append(Case(f"the main job with {a.leave_free} MiB free", "value", harness.module_argv(
        __spec__.name, "--child", "job", "--leave-free", str(a.leave_free), "--out", "{out}")))
    return out


def parse(argv=None):
    ap = argparse.ArgumentParser(description=QUESTION)
    harness.common_args(ap, "data/benchmarks/memory.json", repeats=1)
    ap.add_argument("--leave-free", type=int, default=2048, metavar="MiB")
    harness.child_args(ap, list(COSTS.values()) + ["job"])
    return ap.parse_args(argv)


def main(argv=None, runner=harness.run_process, env=None) -> int:
    a = parse(argv)
    if a.child:
        figures = job_child(a.leave_free, a.out + ".job.json") if a.child == "job" \
            else cost_child(a.child)
        with open(a.out, "w") as f:
            json.dump(figures, f)
        return 0
    return BENCH.run(cases(a), a, runner, env)


if __name__ == "__main__":
    sys.exit(main())
