"""Benchmark: a model pinned to a plan file against benchmark mode on and off.

Each mode runs in fresh processes (model/mode_child.py, as the model command's own run
of the model): one for the first iteration (its time and peak memory, every convolution
call synchronised as the model command probes it) and eager steady iterations, one for
steady iterations as CUDA-graph replays of the whole step (advise's method: rounds until
the mean's 95% CI is within +-1%, at most --max-timed-s). The pinned mode runs a third
fresh process, with cudnn-frontend's log on: the plans each of the three ran, from the
op's own record, must be the same, and the log must name them. Beside them, the op's host cost per call against ATen's (a launch-bound loop of a
tiny convolution), and the gain the sweep predicted ("left on the table") with --sweep.

Usage: python scripts/bench_pin.py --plans FILE [--sweep SWEEP.json] [--model resnet50]
           [--batch 32] [--amp fp16] [--no-channels-last] [--eval] [--keep DIR] [--json PATH]
       python scripts/bench_pin.py --host-only [--json PATH]   (the host cost alone)
Goals (docs/pinning.md): pinned steady step <= the faster of on and off; pinned first
iteration <= off's + the plan builds; pinned peak reserved <= off's + 5%; eager step <=
off's + 2%; host cost <= ATen's + 3 us; identical plans in every process.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudnn_explorer.core.files import write_atomic  # noqa: E402  (after the path)

MIB = 2**20
MODES = {"off": "heuristic", "on": "benchmark", "pinned": "pinned"}


def spec_key(spec) -> dict:
    """What a kept process's result depends on: its spec with the plan file's path
    replaced by a digest of what the file holds but the time it was written (each call
    writes the file anew, to a fresh place, from the same sweep)."""
    with open(spec["plans"], "rb") as f:
        raw = f.read()
    try:
        doc = json.loads(raw)
    except ValueError:  # not JSON: the bytes themselves
        doc = None
    if isinstance(doc, dict):
        doc.pop("created", None)
        raw = json.dumps(doc, sort_keys=True).encode()
    return dict(spec, plans=hashlib.sha256(raw).hexdigest())


def kept_result(keep, name, spec):
    """(result, frontend log) of process ``name`` kept in ``keep`` for this very spec;
    None when there is none, it was kept for another spec, or it does not read."""
    from cudnn_explorer.core.child_records import ModelChildResult

    paths = [os.path.join(keep, f"{name}.{x}") for x in ("key.json", "result.json", "log")]
    try:
        with open(paths[0]) as f:
            if json.load(f) != spec_key(spec):
                return None
        with open(paths[1]) as f:
            result = ModelChildResult.read(json.load(f), name)
        log = ""
        if os.path.exists(paths[2]):
            with open(paths[2], "rb") as f:
                log = f.read().decode(errors="replace")
    except (OSError, ValueError):  # absent, or not a result this script wrote
        return None
    if result.error or not result.sizes:
        return None
    return result, log


def child(spec, tmp, name, timeout_s, frontend_log=False, keep=None):
    """One model process: (its result, its wall time in s, cudnn-frontend's log); with
    ``keep``, a result kept there for the same spec is read back instead (wall time None),
    and a new one is kept there. Note [no log while timing]: cudnn-frontend's log, when on,
    writes lines at every execution of a graph's plan (the pinned op's path) but not of
    PyTorch's own plans: it is on only in the process that reads the plans from it, never
    in a timed one."""
    from cudnn_explorer.core.child_records import ModelChildResult

    if keep:
        got = kept_result(keep, name, spec)
        if got is not None:
            return got[0], None, got[1]
    spec_path = os.path.join(tmp, f"{name}.spec.json")
    result_path = os.path.join(tmp, f"{name}.result.json")
    log = os.path.join(tmp, f"{name}.frontend.log")
    with open(spec_path, "w") as f:
        json.dump(dict(spec, log_file=log if frontend_log else None), f)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CUDNN_FRONTEND_LOG")}
    if frontend_log:
        env.update(CUDNN_FRONTEND_LOG_INFO="1", CUDNN_FRONTEND_LOG_FILE=log)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "cudnn_explorer.model.mode_child",
                           spec_path, result_path], env=env, capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0 or not os.path.exists(result_path):
        tail = (proc.stderr or "").strip().splitlines()[-3:]
        raise SystemExit(f"{name}: the model process failed (rc {proc.returncode}): "
                         f"{' | '.join(tail)}")
    with open(result_path) as f:
        result = ModelChildResult.read(json.load(f), name)
    if result.error or not result.sizes:
        raise SystemExit(f"{name}: {result.error or 'no size finished'}")
    log_text = ""
    if frontend_log and os.path.exists(log):
        with open(log, "rb") as f:
            log_text = f.read().decode(errors="replace")
    if keep:  # the result first, its key last: a key is there only with what it names
        os.makedirs(keep, exist_ok=True)
        with open(result_path) as f:
            write_atomic(os.path.join(keep, f"{name}.result.json"), f.read())
        write_atomic(os.path.join(keep, f"{name}.log"), log_text)
        write_atomic(os.path.join(keep, f"{name}.key.json"), json.dumps(spec_key(spec)))
    return result, wall, log_text


def host_cost(calls=3000):
    """us per call of a tiny fp16 channels_last 3x3 convolution (launch-bound): without
    gradients, ATen (F.conv2d, benchmark off) and the pinned op called directly (by its
    eager entry, and through torch.ops), then an nn.Conv2d layer unpinned and pinned; and
    a training call of the layer (forward with autograd, backward to the input and the
    weight: three cuDNN directions), unpinned and pinned; in this process, each group's
    variants timed in turns."""
    import torch

    from cudnn_explorer.pinning import op
    from cudnn_explorer.pinning.functional import CONV, call
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from pinning_helpers import heuristic_plans

    from cudnn_explorer.model.tracer import problem_of

    torch.backends.cudnn.benchmark = False
    x = torch.randn(1, 8, 8, 8, device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    w = torch.randn(8, 8, 3, 3, device="cuda", dtype=torch.float16).contiguous(
        memory_format=torch.channels_last)
    problem = problem_of(x, w, [1, 1], [1, 1], [1, 1], 1, True)
    op_plans = heuristic_plans([problem])
    op.load_plans(op_plans)

    def per_call(fns, rounds=5):
        """{name: us per call} of each of ``fns`` ({name: fn}), the best of ``rounds``
        blocks of ``calls`` calls, the variants' blocks in turns (ABAB: a drift of the
        host's speed reaches every variant alike)."""
        for fn in fns.values():
            for _ in range(200):
                fn()
        torch.cuda.synchronize()
        best = {}
        for _ in range(rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(calls):
                    fn()
                torch.cuda.synchronize()
                us = (time.perf_counter() - t0) / calls * 1e6
                best[name] = min(best.get(name, us), us)
        return best

    from cudnn_explorer.pinning.modules import pin

    def layer():
        torch.manual_seed(0)
        return torch.nn.Conv2d(8, 8, 3, padding=1, bias=False).cuda().half().to(
            memory_format=torch.channels_last)

    plain, pinned = layer(), layer()
    pin(pinned, op_plans, allow_environment=True)
    with torch.no_grad():
        us = per_call({
            "aten_us": lambda: torch.nn.functional.conv2d(x, w, None, 1, 1),
            "pinned_us": lambda: call(x, w, None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1),
            "pinned_torch_ops_us": lambda: CONV(x, w, None, (1, 1), (1, 1), (1, 1), False,
                                                (0, 0), 1),
            "layer_us": lambda: plain(x), "pinned_layer_us": lambda: pinned(x)})
    # a training call: the layer's forward with autograd, and its backward (input and
    # weight gradients), unpinned and pinned
    xg = x.detach().clone().requires_grad_(True)
    grad = torch.randn_like(plain(x))
    us.update(per_call({"train_layer_us": lambda: plain(xg).backward(grad),
                        "pinned_train_us": lambda: pinned(xg).backward(grad)}))
    counts = op.pin_counts(reset=True)
    op.clear_plans()
    return {**us, "pinned_calls": counts.pinned_calls, "fallback_calls": counts.fallback_calls,
            "problem": problem.describe()}


def summarise(result, graph_result):
    from cudnn_explorer.core import stats

    size, steady = result.sizes[0], graph_result.sizes[0]
    out = {"first_ms": size.first_ms, "first_peak_reserved_mib":
           size.first_peak_reserved / MIB, "first_peak_alloc_mib": size.first_peak_alloc / MIB,
           "eager_median_ms": stats.median(size.steady_ms),
           "eager_spread": stats.spread(size.steady_ms),
           "eager_n": len(size.steady_ms), "steady_method": steady.steady_method,
           "steady_note": steady.steady_note,
           "graph_mean_ms": stats.mean(steady.steady_ms),
           "graph_ci95_ms": stats.ci95_halfwidth(steady.steady_ms),
           "graph_median_ms": stats.median(steady.steady_ms), "graph_n": len(steady.steady_ms)}
    for name, r in (("first", size.pinned_first), ("steady_eager", size.pinned_steady)):
        if r is not None:
            out[f"pinned_{name}"] = {"pinned_calls": r.pinned_calls,
                                     "fallback_calls": r.fallback_calls,
                                     "fallbacks": [f"{d.description}: {d.reason}"
                                                   for d in r.fallbacks][:20]}
    if size.pinned_first is not None:
        out["build_ms"] = sum(d.build_ms for d in size.pinned_first.directions)
        out["plans_ran"] = size.pinned_first.plans_ran
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", default=None, help="the plan file (required but with --host-only)")
    ap.add_argument("--sweep", default=None, help="the sweep the plans came from")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--input", default="3x224x224")
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--channels-last", dest="channels_last", action="store_true", default=True,
                    help="model and input in channels_last (the default)")
    ap.add_argument("--no-channels-last", dest="channels_last", action="store_false")
    ap.add_argument("--eval", action="store_true", help="inference (default: a training step)")
    ap.add_argument("--iterations", type=int, default=20)
    ap.add_argument("--max-timed-s", type=float, default=15.0)
    ap.add_argument("--timeout-s", type=float, default=240.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep each process's result in DIR as it finishes, and read back "
                         "those kept for the same spec and plan file instead of running "
                         "them again (a benchmark spread over calls of limited length)")
    ap.add_argument("--host-only", action="store_true",
                    help="only the op's host cost per call (no model, --plans unread)")
    a = ap.parse_args()
    if not a.plans and not a.host_only:
        ap.error("--plans FILE is required (or --host-only)")
    if a.host_only:
        text = json.dumps({"host_cost": host_cost()}, indent=1)
        print(text)
        if a.json:
            write_atomic(a.json, text + "\n")
        return 0

    from cudnn_explorer.core.capture import ModelSpec

    spec = ModelSpec.create(model=a.model, batch=a.batch,
                            input_shape=tuple(int(v) for v in a.input.split("x")),
                            amp=a.amp, channels_last=a.channels_last, train=not a.eval)
    base = {"model": spec.to_dict(), "shapes": [list(spec.input_shape)], "tf32": True,
            "device": 0, "seed": 0, "iterations": a.iterations, "warmup": 5,
            "target_ci": 0.01, "max_timed_s": a.max_timed_s,
            "plans": os.path.abspath(a.plans), "allow_environment": False}
    # kept: the processes read back from --keep, measured by an earlier run of this script
    out = {"model": spec.describe(), "plans": a.plans, "modes": {}, "kept": []}
    with tempfile.TemporaryDirectory() as tmp:
        runs = {}
        for steady_only in (False, True):  # interleaved: every mode's first, then steady
            for name, mode in MODES.items():
                tag = f"{name}-{'graph' if steady_only else 'first'}"
                r, wall, log = child(dict(base, mode=mode, steady_only=steady_only), tmp, tag,
                                     a.timeout_s, keep=a.keep)
                runs[tag] = (r, log)
                if wall is None:
                    out["kept"].append(tag)
                print(f"{tag}: " + ("kept from an earlier run" if wall is None
                                    else f"{wall:.1f} s"), flush=True)
        third, wall, third_log = child(dict(base, mode="pinned", steady_only=True), tmp,
                                       "pinned-third", a.timeout_s, frontend_log=True,
                                       keep=a.keep)
        if wall is None:
            out["kept"].append("pinned-third")
        for name in MODES:
            out["modes"][name] = summarise(runs[f"{name}-first"][0], runs[f"{name}-graph"][0])
        ran = [r.sizes[0].pinned_first.plans_ran for r in
               (runs["pinned-first"][0], runs["pinned-graph"][0], third)]
        out["same_plans_in_three_processes"] = ran[0] == ran[1] == ran[2]
        out["plans_ran"] = len(ran[0])
        tags = [p.rsplit(": ", 1)[1] for p in ran[2]]
        out["frontend_log_names_the_plans"] = sum(1 for t in tags if t and t in third_log)
        out["pin_report"] = runs["pinned-first"][0].pin_report.to_dict()
    out["host_cost"] = host_cost()
    if a.sweep:
        from cudnn_explorer.core.choices import sweep_totals
        from cudnn_explorer.core.documents import read_saved

        sw, _ = read_saved(a.sweep, "bench_pin --sweep")
        t = sweep_totals(sw)
        out["sweep_prediction"] = {"pytorch_benchmark_ms": t.pytorch_ms, "best_ms": t.best_ms,
                                   "left_ms": t.left_ms, "covered": t.covered,
                                   "counted": t.counted}
    m = out["modes"]
    faster = min(m["on"]["graph_mean_ms"], m["off"]["graph_mean_ms"])
    out["checks"] = {
        "steady_pinned_le_faster_of_on_off": m["pinned"]["graph_mean_ms"] <= faster,
        "first_pinned_le_off_plus_builds":
            m["pinned"]["first_ms"] <= m["off"]["first_ms"] + m["pinned"].get("build_ms", 0),
        "first_peak_reserved_le_off_plus_5pct":
            m["pinned"]["first_peak_reserved_mib"] <= 1.05 * m["off"]["first_peak_reserved_mib"],
        "eager_le_off_plus_2pct": m["pinned"]["eager_median_ms"] <= 1.02 * m["off"]["eager_median_ms"],
        "host_cost_le_aten_plus_3us":
            out["host_cost"]["pinned_us"] <= out["host_cost"]["aten_us"] + 3.0,
        # a training call runs three cuDNN directions: 3 us each
        "train_host_cost_le_aten_plus_3us_per_direction":
            out["host_cost"]["pinned_train_us"] <= out["host_cost"]["train_layer_us"] + 9.0,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if a.json:
        write_atomic(a.json, text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
