"""Where a pinned model's eager step spends its host time, against PyTorch's own.

One process, one model (ResNet-50 b32 AMP fp16 channels_last training step by default),
these variants in interleaved rounds (each switch warmed before it is timed):
  off               PyTorch's convolutions, benchmark off
  pinned-heuristic  pinned to heuristic mode A's first config for every problem-direction
                    (PyTorch's benchmark-off engines, run by the pinned op)
  pinned-best       pinned to the sweep's best configs (plans write's default policy)
  pinned-pytorch    pinned to benchmark mode's picks as the sweep recorded them
  on                benchmark on (last: PyTorch's plan cache keeps its picks afterwards)
Per variant: the eager step (median of CUDA-event times around each step, as the model
command's steady eager samples; against off's in the same round, Note [paired rounds]),
the host's time to enqueue one step (no synchronisation inside it), and a CPU-only
torch.profiler profile of a few steps: per op, calls per step and self-CPU microseconds
per call, for the convolution ops, the pinned op's plan execution
(cudnn_explorer::execute_plan) and autograd's nodes. Then, per pinned variant, off and
pinned in alternating steps (Note [alternating steps]): the median of each pinned step
against the off steps around it, the figure least moved by the host's drift.
pinned-heuristic against off is the op's own cost; pinned-best against pinned-heuristic
is what the engines' own host cost adds.

Usage: python scripts/profile_pin_host.py --sweep SWEEP.json [--model resnet50] [--batch 32]
           [--input 3x224x224] [--amp fp16] [--no-channels-last] [--rounds 10] [--steps 10]
           [--pairs 200] [--json PATH]
"""
import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

from cudnn_explorer.core.files import write_atomic  # noqa: E402  (after the path)

KEEP = ("conv", "Conv", "cudnn", "execute_plan", "Backward", "autograd::engine")


def step_fn(torch, model, inputs, spec, device):
    from cudnn_explorer.model.tracer import iteration

    def step():
        model.zero_grad(set_to_none=True)
        iteration(model, inputs, spec, device)
    return step


def timed(torch, step, steps):
    """(eager ms per step from CUDA events, host enqueue ms per step), each per step."""
    ends, host = [], []
    for _ in range(steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        t0 = time.perf_counter()
        step()
        host.append((time.perf_counter() - t0) * 1e3)
        b.record()
        ends.append((a, b))
    torch.cuda.synchronize()
    return [a.elapsed_time(b) for a, b in ends], host


def alternating(torch, step, model, pairs):
    """Note [alternating steps]: benchmark off and pinned in turns, one step each, the
    layers' classes swapped between steps (the plans stay loaded and built): the ratio of
    each pinned step to the mean of the off steps around it, so that the host's drift,
    slower than a step, cancels. ([ratios], [off ms], [pinned ms])."""
    layers = [(m, type(m), type(m)._cudnn_explorer_base) for m in model.modules()
              if getattr(type(m), "_cudnn_explorer_base", None) is not None]

    def swap(pinned):
        for m, p, base in layers:
            m.__class__ = p if pinned else base

    events = []
    for i in range(2 * pairs + 1):  # off, pinned, off, ..., off
        swap(i % 2 == 1)
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        events.append((a, b))
    torch.cuda.synchronize()
    swap(True)
    ms = [a.elapsed_time(b) for a, b in events]
    off, pinned = ms[0::2], ms[1::2]
    ratios = [p / ((off[k] + off[k + 1]) / 2) for k, p in enumerate(pinned)]
    return ratios, off, pinned


def profiled(torch, step, steps):
    """{op name: (calls per step, self-CPU us per call, CPU total us per call)} of ops
    whose names KEEP matches, and the profile's whole self-CPU us per step."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    out, total = {}, 0.0
    for e in prof.key_averages():
        total += e.self_cpu_time_total
        if any(k in e.key for k in KEEP) and e.count:
            out[e.key] = (e.count / steps, e.self_cpu_time_total / e.count,
                          e.cpu_time_total / e.count)
    return out, total / steps


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True)
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", default="3x224x224")
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false",
                    default=True)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--profile-steps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=200,
                    help="alternating off / pinned step pairs per pinned variant")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import torch

    from cudnn_explorer.core.capture import ModelSpec
    from cudnn_explorer.jobs.plans import write_plans
    from cudnn_explorer.model import zoo
    from cudnn_explorer.model.tracer import capture
    from cudnn_explorer.pinning import op
    from cudnn_explorer.pinning.modules import pin, unpin
    from pinning_helpers import heuristic_plans

    device = "cuda:0"
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = True
    spec = ModelSpec.create(model=a.model, batch=a.batch,
                            input_shape=tuple(int(v) for v in a.input.split("x")),
                            amp=a.amp, channels_last=a.channels_last, train=True)
    torch.manual_seed(0)
    model, inputs = zoo.build(spec, device)
    model.train()
    cap = capture(model, inputs, spec, device)
    t0 = time.perf_counter()
    plans = {"pinned-heuristic": heuristic_plans([u.problem for u in cap.problems], limit=1),
             "pinned-best": write_plans(a.sweep, policy="best"),
             "pinned-pytorch": write_plans(a.sweep, policy="pytorch")}
    print(f"plans: {', '.join(f'{k} {len(v.entries)}' for k, v in plans.items())} "
          f"({time.perf_counter() - t0:.1f} s for the heuristic file)", flush=True)
    step = step_fn(torch, model, inputs, spec, device)

    def use(name):
        unpin(model)
        op.clear_plans()
        torch.backends.cudnn.benchmark = name == "on"
        if name.startswith("pinned"):
            pin(model, plans[name], allow_environment=True)
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        op.pin_counts(reset=True)

    # Note [paired rounds]: the host's speed drifts over a run (benchmark off's own eager
    # step moved from 19.4 to 22.0 ms over four rounds on the H200's host), more than the
    # differences measured here; so each round times every variant in a short block, and
    # a variant's figure is the median over rounds of its block's median divided by off's
    # in the same round.
    names = ["off", "pinned-heuristic", "pinned-best", "pinned-pytorch"]
    eager = {n: [] for n in names + ["on"]}
    host = {n: [] for n in names + ["on"]}
    ratios = {n: [] for n in names}
    counts = {}
    for r in range(a.rounds):
        block = {}
        for n in names + (["on"] if r == a.rounds - 1 else []):
            use(n)
            e, h = timed(torch, step, a.steps)
            eager[n] += e
            host[n] += h
            block[n] = statistics.median(e)
            c = op.pin_counts(reset=True)
            counts[n] = (c.pinned_calls, c.fallback_calls)
        for n in names:
            ratios[n].append(block[n] / block["off"])
        print(f"round {r + 1}: " + ", ".join(f"{n} {block[n]:.2f}" for n in names), flush=True)
    out = {"model": spec.describe(), "torch": torch.__version__,
           "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0),
           "variants": {}, "alternating": {}}
    for n in names[1:]:
        use(n)
        alternating(torch, step, model, 10)  # warm both
        # (not ``ratios``: the paired rounds' ratios per variant are reported below)
        steps, off, pinned = alternating(torch, step, model, a.pairs)
        q = statistics.quantiles(steps, n=4)
        out["alternating"][n] = {
            "pairs": len(steps), "vs_off_median": statistics.median(steps) - 1,
            "vs_off_iqr": [q[0] - 1, q[2] - 1], "off_median_ms": statistics.median(off),
            "pinned_median_ms": statistics.median(pinned)}
        print(f"alternating {n}: {statistics.median(steps) - 1:+.1%} against off (IQR "
              f"{q[0] - 1:+.1%} .. {q[2] - 1:+.1%}; off {statistics.median(off):.2f} ms, "
              f"pinned {statistics.median(pinned):.2f} ms; {len(steps)} pairs)", flush=True)
    # the profiles, after the timed rounds; "on" stays last (its cache outlives it)
    for n in names + ["on"]:
        use(n)
        ops, total = profiled(torch, step, a.profile_steps)
        out["variants"][n] = {
            "eager_median_ms": statistics.median(eager[n]), "eager_n": len(eager[n]),
            "vs_off_paired": statistics.median(ratios[n]) - 1 if n in ratios else None,
            "vs_off_paired_range": [min(ratios[n]) - 1, max(ratios[n]) - 1]
            if n in ratios else None,
            "host_median_ms": statistics.median(host[n]),
            "pinned_calls": counts[n][0], "fallback_calls": counts[n][1],
            "profile_self_cpu_us_per_step": total,
            "ops": {k: {"calls_per_step": v[0], "self_us": v[1], "total_us": v[2]}
                    for k, v in sorted(ops.items(), key=lambda kv: -kv[1][0] * kv[1][1])}}
    out["rounds"], out["steps_per_block"] = a.rounds, a.steps
    print(f"{'variant':18} {'eager ms':>9} {'vs off (paired rounds: median, range)':>38} "
          f"{'host ms':>8} {'pinned':>7} {'fallback':>8}")
    for n, v in out["variants"].items():
        paired = "last round only" if v["vs_off_paired"] is None else \
            f"{v['vs_off_paired']:+.1%} ({v['vs_off_paired_range'][0]:+.1%} .. " \
            f"{v['vs_off_paired_range'][1]:+.1%})"
        print(f"{n:18} {v['eager_median_ms']:9.2f} {paired:>38} "
              f"{v['host_median_ms']:8.2f} {v['pinned_calls']:7d} {v['fallback_calls']:8d}")
        for k, o in list(v["ops"].items())[:12]:
            print(f"    {k[:60]:60} {o['calls_per_step']:6.1f}/step  self {o['self_us']:7.1f} us"
                  f"  total {o['total_us']:7.1f} us")
    if a.json:
        write_atomic(a.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
