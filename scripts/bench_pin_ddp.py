"""Benchmark: DDP training with benchmark mode on against every rank pinned to one plan file.

Launches ``torchrun --nproc-per-node GPUS`` once per mode (``on``: benchmark mode, each
rank searching for itself; ``pinned``: every rank pins the plan file, which rank 0 reads
and shares). Each rank trains ResNet-50 (AMP, channels_last, DDP) on random data and
reports:

* its first iteration (ms, synchronised, after a barrier);
* its steady step (CUDA events around each step; mean and 95% CI);
* the time its step spends on gradient all-reduce and waiting for the other ranks: the
  steady step with DDP's all-reduce minus the same step under ``no_sync()`` (no
  all-reduce), timed alternately in the same process;
* the plans it ran, from the pinned op's own record (pinned mode): identical on every
  rank when pinned.

Usage: python scripts/bench_pin_ddp.py --plans FILE [--gpus 2] [--model resnet50]
           [--batch 32] [--image 224] [--amp fp16] [--steps 50] [--json PATH]
       (--device cpu --gpus 2: the same flow on the CPU with gloo, for a smoke test)
"""
import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudnn_explorer.core.files import write_atomic  # noqa: E402  (after the path)


def _stats(xs):
    from cudnn_explorer.core import stats

    return {"mean_ms": stats.mean(xs), "ci95_ms": stats.ci95_halfwidth(xs),
            "median_ms": stats.median(xs), "n": len(xs)}


def worker(a) -> int:
    import torch
    import torch.distributed as dist
    import torchvision

    import cudnn_explorer
    from cudnn_explorer.pinning import op

    cpu = a.device == "cpu"
    local = int(os.environ.get("LOCAL_RANK", 0))
    dist.init_process_group("gloo" if cpu else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = torch.device("cpu") if cpu else torch.device("cuda", local)
    if not cpu:
        torch.cuda.set_device(device)
    torch.backends.cudnn.benchmark = a.mode == "on"
    torch.manual_seed(0)
    model = getattr(torchvision.models, a.model)().to(device).to(
        memory_format=torch.channels_last)
    report = None
    if a.mode == "pinned":
        report = cudnn_explorer.pin(model, a.plans, group=dist.group.WORLD)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=None if cpu else [local])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator(device=device).manual_seed(rank)
    x = torch.randn(a.batch, 3, a.image, a.image, generator=gen, device=device).contiguous(
        memory_format=torch.channels_last)
    y = torch.randint(0, 1000, (a.batch,), generator=gen, device=device)
    amp = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(a.amp)

    def step(sync=True):
        opt.zero_grad(set_to_none=True)
        ctx = ddp.no_sync() if not sync else contextlib.nullcontext()
        with ctx:
            with torch.autocast(device.type, dtype=amp or torch.float32,
                                enabled=amp is not None and not cpu):
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
            loss.backward()
        opt.step()

    def synchronize():
        if not cpu:
            torch.cuda.synchronize()

    dist.barrier()
    t0 = time.perf_counter()
    step()
    synchronize()
    first_ms = (time.perf_counter() - t0) * 1e3
    ran = op.pin_counts(reset=True) if a.mode == "pinned" else None
    for _ in range(5):
        step()
    synchronize()
    timed = {True: [], False: []}
    for k in range(2 * a.steps):  # alternately with and without the all-reduce
        sync = k % 2 == 0
        if cpu:
            t = time.perf_counter()
            step(sync)
            timed[sync].append((time.perf_counter() - t) * 1e3)
        else:
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step(sync)
            e.record()
            e.synchronize()
            timed[sync].append(s.elapsed_time(e))
    mine = {"rank": rank, "device": str(device),
            "gpu": torch.cuda.get_device_name(device) if not cpu else "cpu",
            "first_ms": first_ms, "step": _stats(timed[True]),
            "step_without_allreduce": _stats(timed[False]),
            "allreduce_and_wait_ms": _stats(timed[True])["mean_ms"]
            - _stats(timed[False])["mean_ms"],
            "plans_ran": ran.plans_ran if ran is not None else None,
            "pinned_calls": ran.pinned_calls if ran is not None else None,
            "fallback_calls": ran.fallback_calls if ran is not None else None,
            "pin_report": report.to_dict() if report is not None else None}
    every = [None] * world
    dist.all_gather_object(every, mine)
    if rank == 0:
        with open(a.out, "w") as f:
            json.dump({"mode": a.mode, "ranks": every}, f, indent=1)
    dist.destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", required=True)
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32, help="per rank")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--json", default=None)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mode", default="pinned", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("on", "pinned"):
            out = os.path.join(tmp, f"{mode}.json")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={a.gpus}", os.path.abspath(__file__), "--worker",
                   "--mode", mode, "--out", out, "--plans", os.path.abspath(a.plans),
                   "--model", a.model, "--batch", str(a.batch), "--image", str(a.image),
                   "--amp", a.amp, "--steps", str(a.steps), "--device", a.device]
            print("$ " + " ".join(cmd[1:]), flush=True)
            rc = subprocess.run(cmd, cwd=ROOT).returncode
            if rc != 0 or not os.path.exists(out):
                print(f"{mode}: torchrun failed (exit {rc})", file=sys.stderr)
                return 1
            with open(out) as f:
                results[mode] = json.load(f)
    pinned = [r["plans_ran"] for r in results["pinned"]["ranks"]]
    summary = {"identical_plans_on_every_rank_when_pinned": all(p == pinned[0] for p in pinned),
               "plans_ran_per_rank": [len(p) for p in pinned],
               "modes": {m: [{k: r[k] for k in ("rank", "gpu", "first_ms", "step",
                                                 "allreduce_and_wait_ms", "pinned_calls",
                                                 "fallback_calls")}
                             for r in results[m]["ranks"]] for m in results}}
    text = json.dumps({"summary": summary, "results": results}, indent=1)
    print(json.dumps(summary, indent=1))
    if a.json:
        write_atomic(a.json, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
