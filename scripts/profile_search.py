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

Usage: python scripts/profile_search.py [--shape 32,64,56,56] [--out-channels 64]
           [--kernel 1] [--padding 0] [--stride 1] [--dtype float16] [--layout nhwc]
           [--direction bwd-data] [--problem-profile] [--top 25] [--json PATH]
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
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()

    import cudnn_explorer as ce
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure import native
    from cudnn_explorer.measure.engine_worker import _gpu_setup
    from cudnn_explorer.measure.engines import explore_engines

    problem = ce.ConvProblem.create(a.shape, out_channels=a.out_channels, kernel=a.kernel,
                                    padding=a.padding, stride=a.stride, dtype=a.dtype,
                                    layout=a.layout)
    opts = ExploreOptions.create().profiled("quick", model=not a.problem_profile)
    try:
        native.require_gpu(opts.device)
    except ce.ExplorerError as e:
        raise SystemExit(f"profile_search: {e}")
    native_problem, tensors, ref = _gpu_setup(problem, a.direction, opts.device, opts.seed,
                                              opts.check)
    search = TimedCalls(native.engine_search(a.direction, native_problem))
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    space = explore_engines(problem, a.direction, native_problem, tensors, ref,
                            max_per_engine=opts.engine_configs,
                            time_budget_s=opts.engine_budget_s, timing=opts.timing,
                            kernels=opts.engine_sampling, sample=opts.engine_sampling,
                            search=search, staged=opts.staged)
    prof.disable()
    wall = time.perf_counter() - t0
    configs = len(space.configs)
    native_s = sum(search.seconds.values())
    gpu_s = sum(gpu_ms(c.timing) for c in space.configs) / 1e3
    stats = io.StringIO()
    pstats.Stats(prof, stream=stats).sort_stats("cumulative").print_stats(a.top)
    out = {"problem": problem.describe(), "direction": a.direction,
           "profile": "problem quick" if a.problem_profile else "model quick",
           "wall_s": round(wall, 3), "configs": configs,
           "wall_ms_per_config": round(1e3 * wall / configs, 2) if configs else None,
           "native_s": {k: round(v, 3) for k, v in sorted(search.seconds.items())},
           "native_calls": dict(search.calls), "python_s": round(wall - native_s, 3),
           "gpu_s_estimated": round(gpu_s, 3),
           "rounds": [{k: r.get(k) for k in ("round", "timed", "left", "wall_s")}
                      for r in space.rounds]}
    print(f"{out['problem']} {a.direction} ({out['profile']}): {wall:.2f} s for {configs} "
          f"configs ({out['wall_ms_per_config']} ms each)")
    print("host time inside the native search's calls (s): " + ", ".join(
        f"{k} {v:.3f} ({search.calls[k]} calls)" for k, v in sorted(search.seconds.items())))
    print(f"outside them (Python): {out['python_s']:.3f} s; the configs' launches on the GPU, "
          f"estimated from their timing records: {gpu_s:.3f} s")
    for r in out["rounds"]:
        print(f"  round {r['round']}: {r['timed']} timed, {r.get('left')} left, "
              f"{r['wall_s']:.3f} s" if r.get("wall_s") is not None else f"  {r}")
    print(stats.getvalue())
    if a.json:
        write_atomic(a.json, json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
