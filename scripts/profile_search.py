"""Where an engine-config search spends its wall time, config by config.

One problem-direction's search runs in this process (no engine worker, no IPC), as a
model sweep's quick profile runs it by default (the configs PyTorch's heuristics and
fallbacks list, staged, 25 ms budgets for the finalists; --problem-profile: the single
problem's quick profile, every engine's knob space sampled), under cProfile. It prints:
- the search's wall time, its configs, and the wall time per config;
- the host time inside each native call of the search (EngineSearch.build, .measure,
  .execute, the heuristics and the engines' knobs), summed, against the rest (Python);
- the GPU time the configs' launches took, estimated from each config's timing record
  (median per launch x the launches it counts: warm-up, samples, the eager loop);
- cProfile's functions with the most cumulative time.

--legacy: the direction's legacy rows instead (Find, their staged re-timing, the checks,
their kernels; LegacyLab's find, measure and kernels timed as the native calls), after
the time the lab took to make the tensors, descriptors and float64 reference.

Usage: python scripts/profile_search.py [--shape 32,64,56,56] [--out-channels 64]
           [--kernel 1] [--padding 0] [--stride 1] [--dtype float16] [--layout nhwc]
           [--direction bwd-data] [--problem-profile] [--legacy] [--top 25] [--json PATH]
"""
import argparse
import collections
import cProfile
import io
import json
import os
import pstats
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudnn_explorer.core.files import write_atomic  # noqa: E402  (after the path)


class TimedCalls:
    """The native search with the host time of each of its calls summed by name."""

    def __init__(self, inner):
        self._inner = inner
        self.seconds = collections.defaultdict(float)
        self.calls = collections.Counter()

    def __getattr__(self, name):
        f = getattr(self._inner, name)
        if not callable(f):
            return f

        # the heuristics by mode (A, B, FALLBACK): their costs differ
        def call(*a, **k):
            key = f"{name} {a[0]}" if name == "heuristics" and a else name
            t0 = time.perf_counter()
            try:
                return f(*a, **k)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        return call


def gpu_ms(timing) -> float:
    """The GPU time (ms) a timing record's launches took, estimated: its median per
    launch times the launches it counts (warm-up and samples), and its eager loop's."""
    if timing is None:
        return 0.0
    own = timing.median_ms * (timing.samples * timing.launches_per_sample
                              + timing.warmup_launches)
    return own + gpu_ms(timing.eager)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="32,64,56,56")
    ap.add_argument("--out-channels", type=int, default=64)
    ap.add_argument("--kernel", type=int, default=1)
    ap.add_argument("--padding", type=int, default=0)
    ap.add_argument("--stride", type=int, default=1)
    ap.add_argument("--dtype", default="float16")
    ap.add_argument("--layout", default="nhwc")
    ap.add_argument("--direction", default="bwd-data", choices=["fwd", "bwd-data", "bwd-filter"])
    ap.add_argument("--problem-profile", action="store_true",
                    help="the single problem's quick profile (knob spaces sampled) instead "
                         "of a model sweep's")
    ap.add_argument("--legacy", action="store_true",
                    help="profile the direction's legacy rows instead of its engine configs")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import cudnn_explorer as ce
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure import native

    problem = ce.ConvProblem.create(a.shape, out_channels=a.out_channels, kernel=a.kernel,
                                    padding=a.padding, stride=a.stride, dtype=a.dtype,
                                    layout=a.layout)
    opts = ExploreOptions.create().profiled("quick", model=not a.problem_profile)
    try:
        native.require_gpu(opts.device)
    except ce.ExplorerError as e:
        raise SystemExit(f"profile_search: {e}")
    prof = cProfile.Profile()
    out = (profile_legacy if a.legacy else profile_engines)(problem, a.direction, opts, prof)
    out.update({"problem": problem.describe(), "direction": a.direction,
                "profile": "problem quick" if a.problem_profile else "model quick"})
    stats = io.StringIO()
    pstats.Stats(prof, stream=stats).sort_stats("cumulative").print_stats(a.top)
    what, n = ("legacy rows", out["rows"]) if a.legacy else ("configs", out["configs"])
    print(f"{out['problem']} {a.direction} ({out['profile']}): {out['wall_s']:.2f} s for "
          f"{n} {what} ({out['wall_ms_per_item']} ms each)"
          + (f", after {out['setup_s']:.3f} s making the tensors, descriptors and reference"
             if a.legacy else ""))
    print("host time inside the native calls (s): " + ", ".join(
        f"{k} {v:.3f} ({out['native_calls'][k]} calls)" for k, v in out["native_s"].items()))
    print(f"outside them (Python): {out['python_s']:.3f} s; the launches on the GPU, "
          f"estimated from the timing records: {out['gpu_s_estimated']:.3f} s")
    for r in out["rounds"]:
        print(round_line(r))
    print(stats.getvalue())
    if a.json:
        write_atomic(a.json, json.dumps(out, indent=1) + "\n")
    return 0


def round_line(r: dict) -> str:
    """One round of the summary, as printed: what it timed (the legacy rows do not record
    it), what left, its wall time (nor that)."""
    timed, wall = r.get("timed"), r.get("wall_s")
    return f"  round {r['round']}: " + ", ".join(
        ([] if timed is None else [f"{timed} timed"]) + [f"{r.get('left')} left"]
        + ([] if wall is None else [f"{wall:.3f} s"]))


def profiled(prof, run):
    """(run()'s result, its wall seconds), run under ``prof``."""
    t0 = time.perf_counter()
    prof.enable()
    try:
        out = run()
    finally:
        prof.disable()
    return out, time.perf_counter() - t0


def summary(wall: float, items: int, calls: TimedCalls, timings, rounds) -> dict:
    """What both profiles report: the wall time, per item, the native calls' host time
    against the rest, the launches' GPU time estimated from ``timings``."""
    native_s = sum(calls.seconds.values())
    return {"wall_s": round(wall, 3),
            "wall_ms_per_item": round(1e3 * wall / items, 2) if items else None,
            "native_s": {k: round(v, 3) for k, v in sorted(calls.seconds.items())},
            "native_calls": dict(calls.calls), "python_s": round(wall - native_s, 3),
            "gpu_s_estimated": round(sum(gpu_ms(t) for t in timings) / 1e3, 3),
            "rounds": [{k: r.get(k) for k in ("round", "timed", "left", "wall_s")}
                       for r in rounds]}


def profile_engines(problem, direction, opts, prof) -> dict:
    """The direction's engine-config search in this process under ``prof``."""
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.engine_serve import _gpu_setup
    from cudnn_explorer.measure.engines import explore_engines

    native_problem, tensors, ref = _gpu_setup(problem, direction, opts.device, opts.seed,
                                              opts.check)
    search = TimedCalls(native.engine_search(direction, native_problem))
    space, wall = profiled(prof, lambda: explore_engines(
        problem, direction, native_problem, tensors, ref, max_per_engine=opts.engine_configs,
        time_budget_s=opts.engine_budget_s, timing=opts.timing, kernels=opts.engine_sampling,
        sample=opts.engine_sampling, search=search, staged=opts.staged))
    return {"configs": len(space.configs),
            **summary(wall, len(space.configs), search, [c.timing for c in space.configs],
                      space.rounds)}


def profile_legacy(problem, direction, opts, prof) -> dict:
    """The direction's legacy rows (Find, the staged re-timing, checks, kernels) in this
    process under ``prof``, as a sweep measures them; the lab's setup (tensors,
    descriptors, the float64 reference) timed apart."""
    from cudnn_explorer.measure.legacy import LegacyLab, measure_legacy
    from cudnn_explorer.measure.pipeline import environment

    gpu = environment(opts.device).gpu_name
    t0 = time.perf_counter()
    lab = LegacyLab(problem, direction, opts)
    setup = time.perf_counter() - t0
    calls = TimedCalls(lab)
    try:
        rows, wall = profiled(prof, lambda: measure_legacy(
            problem, direction, calls, opts, gpu, want_kernels=opts.pytorch or opts.engines))
    finally:
        lab.close()
    timed = [r for r in rows.find if r.timing is not None]
    rounds = sorted({r.left_round for r in rows.find if r.left_round is not None})
    return {"rows": len(timed), "setup_s": round(setup, 3),
            **summary(wall, len(timed), calls, [r.timing for r in timed],
                      [{"round": n, "timed": None, "left": sum(r.left_round == n
                                                                for r in rows.find)}
                       for n in rounds])}


if __name__ == "__main__":
    sys.exit(main())
