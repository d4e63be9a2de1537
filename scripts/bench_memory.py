"""Benchmark: what the tool's processes cost in GPU memory, and the main job on a GPU
with little free.

1. **Per process.** Fresh processes, one at a time, each holding what it made until this
   one has read the device's used memory (``torch.cuda.mem_get_info``, from this process):
   a CUDA context through torch; the same after a small cuDNN convolution, forward and
   backward (cuDNN's handle, its kernels, the caching allocator's first blocks, emptied);
   and the same with the project's extension imported, as the engine worker has it.
2. **The main job** (default: ``--shape 32,3,224,224 --kernel 3``, every direction,
   engine configs and PyTorch's children, results store off), run as a user runs it, with
   ``--leave-free MiB`` (optional) holding all but that much of the GPU's free memory in
   this process first, as a training job sharing the GPU would. The device's used memory
   is sampled every 20 ms; each sample goes to the phase the job's ``--verbose`` progress
   had reached (PyTorch's children, or a direction's legacy rows or engine configs), and
   each phase's peak is given above the memory used before the job started.

Usage: python scripts/bench_memory.py [--leave-free MiB] [--device N] [--json PATH]
           [-- ARGS of the problem command]
It prints the per-process costs, the job's exit status and last line, each phase's peak,
and what each direction kept (legacy rows, engine configs, its error).
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

MIB = 2**20
DEFAULT_JOB = ["--shape", "32,3,224,224", "--kernel", "3"]

# A small cuDNN convolution, forward and backward, its tensors then freed and the caching
# allocator emptied: what stays is cuDNN's handle, its kernels and the allocator's state.
CONV = ("x = torch.randn(8, 16, 32, 32, device='cuda', dtype=torch.float16, "
        "requires_grad=True).contiguous(memory_format=torch.channels_last)\n"
        "w = torch.randn(16, 16, 3, 3, device='cuda', dtype=torch.float16, "
        "requires_grad=True).contiguous(memory_format=torch.channels_last)\n"
        "torch.nn.functional.conv2d(x, w, padding=1).sum().backward()\n"
        "torch.cuda.synchronize(); del x, w; torch.cuda.empty_cache()")
# What a fresh process makes before it says READY, per kind (Python run with -c).
PROCESS_KINDS = {
    "CUDA context (torch)": "torch.zeros(1, device='cuda')",
    "after a cuDNN convolution (forward and backward)": CONV,
    "the same with the extension imported (the engine worker's)":
        "import cudnn_explorer._C\n" + CONV,
}
READY = "bench_memory: ready"

# The job's --verbose lines: "cudnn_explorer: [  4.4 s] PyTorch child: benchmark",
# "... fwd: cudnnFind", "... bwd-data: engine 12/80 ...".
LINE = re.compile(r"^cudnn_explorer: \[\s*[\d.]+ s\] (.*)$")
DIRECTION = re.compile(r"^(fwd|bwd-data|bwd-filter): (.*)$")
ENGINE_STEPS = ("building the operation graph", "heuristic mode", "querying the knobs",
                "engine ", "round ", "finalists", "engine configs")


def phase_of(message: str, current: str) -> str:
    """The phase a progress message of the job starts (``current`` when it starts none):
    "PyTorch's children", "<direction>: legacy rows" or "<direction>: engine configs"."""
    if message.startswith("PyTorch child"):
        return "PyTorch's children"
    m = DIRECTION.match(message)
    if not m:
        return current
    d, rest = m.groups()
    if rest.startswith(("legacy ", "cudnnFind", "re-timing")) or "legacy finalist" in rest:
        return f"{d}: legacy rows"
    if rest.startswith(ENGINE_STEPS) or re.match(r"^\d+ finalists?:", rest):
        return f"{d}: engine configs"
    return current


def phase_peaks(samples, marks, base):
    """{phase: peak MiB above ``base`` bytes} from ``samples`` [(t, used bytes)] and
    ``marks`` [(t, phase)], each sample in the phase of the last mark before it ("start"
    before the first)."""
    peaks, i, phase = {}, 0, "start"
    for t, used in samples:
        while i < len(marks) and marks[i][0] <= t:
            phase = marks[i][1]
            i += 1
        peaks[phase] = max(peaks.get(phase, 0.0), (used - base) / MIB)
    return peaks


def process_cost(kind: str, code: str, device: int) -> float:
    """MiB of device memory a fresh process holds after ``code`` (see PROCESS_KINDS)."""
    import torch

    prog = (f"import sys, torch\ntorch.cuda.set_device({device})\n{code}\n"
            f"print({READY!r}, flush=True)\nsys.stdin.readline()\n")
    torch.cuda.synchronize(device)
    before = torch.cuda.mem_get_info(device)[0]
    p = subprocess.Popen([sys.executable, "-c", prog], cwd=ROOT, text=True,
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    try:
        line = p.stdout.readline().strip()
        if line != READY:
            raise RuntimeError(f"{kind}: the process ended before it was ready: "
                               f"{p.stderr.read()[-400:]}")
        held = torch.cuda.mem_get_info(device)[0]
    finally:
        p.communicate("\n", timeout=60)
    return (before - held) / MIB


def run_job(args, device: int, out_json: str):
    """Run the problem command with ``args`` as a user does; sample the device's used
    memory meanwhile. Returns (exit status, stderr's last line, wall s, samples, marks)."""
    import torch

    total = torch.cuda.mem_get_info(device)[1]
    samples, marks, done = [], [], threading.Event()

    def sample():
        while not done.is_set():
            samples.append((time.monotonic(), total - torch.cuda.mem_get_info(device)[0]))
            time.sleep(0.02)

    cmd = [sys.executable, "-m", "cudnn_explorer", *args, "--device", str(device),
           "--verbose", "--no-store", "--json", out_json]
    t = threading.Thread(target=sample, daemon=True)
    t0 = time.monotonic()
    t.start()
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    phase, last = "start", ""
    for line in p.stderr:
        line = line.rstrip("\n")
        m = LINE.match(line)
        if m:
            new = phase_of(m.group(1), phase)
            if new != phase:
                marks.append((time.monotonic(), new))
                phase = new
        elif line.strip():
            last = line.strip()
    rc = p.wait()
    done.set()
    t.join()
    return rc, last, time.monotonic() - t0, samples, marks


def kept(path: str):
    """What each direction of the saved exploration kept: rows, configs, error."""
    if not os.path.exists(path):
        return []
    from cudnn_explorer.core.exploration import Exploration

    with open(path) as f:
        exp = Exploration.from_json(f.read())
    return [{"direction": d.direction, "legacy_rows_ok": sum(1 for r in d.find if r.ok),
             "engine_configs_ok": (sum(1 for c in d.engines.configs if c.ok)
                                   if d.engines else None),
             "error": d.error} for d in exp.directions]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--leave-free", type=int, default=None, metavar="MiB",
                    help="hold all but this much of the GPU's free memory during the job")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--json", default=None)
    ap.add_argument("job", nargs="*", help="the problem command's arguments (after --)")
    a = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("bench_memory: needs a CUDA GPU", file=sys.stderr)
        return 3
    torch.cuda.init()
    torch.zeros(1, device=a.device)
    costs, failed = {}, {}
    for k, code in PROCESS_KINDS.items():
        try:
            costs[k] = process_cost(k, code, a.device)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            costs[k], failed[k] = None, str(e)
    print("GPU memory a fresh process holds (MiB, the device's used memory, read from "
          "another process):")
    for k, v in costs.items():
        print(f"  {v:8.1f}  {k}" if v is not None else f"  {'failed':>8}  {k}: {failed[k]}")
    hog = None
    if a.leave_free is not None:
        free = torch.cuda.mem_get_info(a.device)[0]
        hog = torch.empty(max(0, free - a.leave_free * MIB), dtype=torch.uint8,
                          device=a.device)
    free0, total = torch.cuda.mem_get_info(a.device)
    base = total - free0
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "job.json")
        rc, last, wall, samples, marks = run_job(a.job or DEFAULT_JOB, a.device, out)
        directions = kept(out)
    del hog
    peaks = phase_peaks(samples, marks, base)
    args = " ".join(a.job or DEFAULT_JOB)
    print(f"\n$ python -m cudnn_explorer {args} (free at its start: {free0 / MIB:.0f} MiB)")
    print(f"exit {rc} after {wall:.1f} s" + (f"; its last line: {last}" if last else ""))
    print("peak GPU memory above what was used at the job's start, per phase (MiB):")
    for phase, mib in peaks.items():
        print(f"  {mib:8.1f}  {phase}")
    for d in directions:
        print(f"  {d['direction']}: {d['legacy_rows_ok']} legacy rows, "
              f"{d['engine_configs_ok'] if d['engine_configs_ok'] is not None else 'no'} "
              f"engine configs" + (f"; {d['error']}" if d["error"] else ""))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"process_mib": costs, "leave_free_mib": a.leave_free,
                       "free_at_start_mib": free0 / MIB, "job": args, "exit": rc,
                       "last_line": last, "wall_s": wall, "phase_peak_mib": peaks,
                       "directions": directions, "gpu": torch.cuda.get_device_name(a.device),
                       "torch": torch.__version__}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
