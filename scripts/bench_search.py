"""Benchmark: the quick profile (a staged search) against the thorough one, on the same problems.

For each problem (the default problem, the README's examples, float32 with and without
TF32, float16, bfloat16, depthwise and 3-D; with --model, every problem of that model's
capture too), every direction is explored twice in this process, without the results
store: the quick profile (staged), then the thorough one (the full search). Their wall
times are summed per profile, each problem's with its breakdown (PyTorch's children,
legacy rows, engine configs per direction); each exploration's processes start with an
empty CUDA JIT cache (cold_jit_cache), so that neither profile builds on the other's
run-time compiled kernels. Then the best config of each and PyTorch's
benchmark pick are timed again side by side, those alone (explore_isolated's
only_preferred), in one engine worker kept for the whole run, and:
- hit: the staged best is within 2% of the full search's best (goal: 95% of the
  problem-directions);
- PyTorch's pick: the staged search's median of it is within 3% of the full search's.
The misses are printed. Beside them, how far one plan's median moves between the two
searches anyway: the quick / thorough median of every config both timed in full (the quick
search's finalists), over all problems (finalist_ratios).

Usage: python scripts/bench_search.py [--problems NAME,...] [--model resnet50 [--batch 32
           --amp fp16 --channels-last] [--limit N]] [--budget-ms 100] [--model-profile]
           [--no-pytorch] [--config-timeout S] [--keep DIR [--as-kept]] [--json PATH]

--model-profile: the two searches compared are a model sweep's quick profile (only the
engine configs PyTorch's heuristics and fallbacks list, staged) and the same configs each
timed in full: whether staging a model sweep's search loses its best configs. Each
profile's explorations then share one measuring bench, kept for the whole run, as a
sweep's problems do (SweepBenches), rather than starting processes of their own.

--no-pytorch: PyTorch's children are not run (five fresh processes per problem and
profile, about 10 s each time on the H200). Their picks are then neither finalists of
the staged search nor compared, so the hit rate is a lower bound of what a search with
them gets (a model sweep's picks come from its own run of the model, and are finalists).

--config-timeout S: both profiles' --engine-config-timeout (default the tool's, 60 s).
Knob combinations whose launch never ends (docs/limits.md) cost a thorough search the whole
timeout each (four of them on the float16 3x3 problem on the H200); a shorter one makes
the thorough searches affordable, and a config that needs longer is recorded as hung in
both profiles alike.

--keep DIR: each problem's result is kept in DIR/NAME.json as it finishes, and a problem
found there is not measured again, so the benchmark can be spread over several calls of
a limited length (each profile's exploration is kept too, in DIR/NAME.staged.json and
DIR/NAME.full.json, so a call that ends during a problem's thorough search loses only
that search; a wall time read from there is the one measured when it was kept); Ctrl-C
(or SIGINT from `timeout -s INT`) ends it with the totals of the problems that finished.
Each kept document records the digest of the sources that measured it (code_digest); one
kept by other sources is measured again, and the script says so, so that one run's totals
never mix two versions of the tool (a machine may keep a folder from an earlier session).

--as-kept: the totals of the kept documents whatever sources measured them (an archived
run, such as data/reference/h100-same-answers/), measuring nothing: a problem not kept
there is an error.
"""
import argparse
import contextlib
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from cudnn_explorer.core.files import write_atomic  # noqa: E402  (after the path)

# The bfloat16 problems last, so that a call of limited length (--keep) finishes as many
# others as it can first: with --budget-ms 25 on the H200 the README's bfloat16 problem's
# thorough search took 304 s, the default problem's 66 s (the others' not measured yet).
PROBLEMS = {
    "default": dict(shape="32,3,224,224", kernel=3),
    "fp32-tf32": dict(shape="16,64,56,56", out_channels=64, kernel=3),
    "fp32-no-tf32": dict(shape="16,64,56,56", out_channels=64, kernel=3, tf32=False),
    "r50-3x3-fp16-nhwc": dict(shape="32,128,28,28", out_channels=128, kernel=3,
                              dtype="float16", layout="nhwc"),
    "r50-1x1-fp16-nhwc": dict(shape="32,256,56,56", out_channels=64, kernel=1, padding=0,
                              dtype="float16", layout="nhwc"),
    "depthwise-fp16-nhwc": dict(shape="32,64,56,56", out_channels=64, groups=64, kernel=3,
                                dtype="float16", layout="nhwc"),
    "3d-fp16-nhwc": dict(shape="4,32,16,32,32", out_channels=32, kernel=3, dtype="float16",
                         layout="nhwc"),
    "bf16-1x1-s2-nhwc": dict(shape="32,512,28,28", out_channels=1024, kernel=1, stride=2,
                             padding=0, dtype="bfloat16", layout="nhwc"),
    # the README's bfloat16 example (all directions here)
    "readme-bf16-nhwc": dict(shape="32,64,56,56", kernel=3, dtype="bfloat16", layout="nhwc"),
}


def retimed(problem, direction, tags, options, worker=None):
    """{tag: median ms} of ``tags`` timed again together, and only they, in one engine
    worker (``worker``: one kept for every re-timing; default a new one)."""
    from cudnn_explorer.measure.engine_worker import explore_isolated

    one = options.updated(directions=(direction,), engine_sampling=False, staged=False)
    space = explore_isolated(problem, direction, one, preferred_tags=list(tags),
                             worker=worker, only_preferred=True)
    out = {}
    for t in tags:
        c = space.config(t)
        if c is not None and c.time is not None:
            out[t] = c.time
    return out


@contextlib.contextmanager
def cold_jit_cache():
    """An empty CUDA JIT cache for the processes an exploration starts (its engine worker,
    PyTorch's children): CUDA_CACHE_PATH a new folder, removed after. Run-time compiled
    configs built in 0.4-1.5 s in the first profile's search of a problem and 30-50 ms in
    the second's on the H200, so without it the profile that runs second has the shorter
    wall; with it both pay what a first run pays."""
    with tempfile.TemporaryDirectory(prefix="bench_search_jit_") as d, jit_cache(d):
        yield d


@contextlib.contextmanager
def jit_cache(folder):
    """CUDA_CACHE_PATH ``folder`` for the processes started meanwhile (a process reads it
    when it starts), then as it was."""
    old = os.environ.get("CUDA_CACHE_PATH")
    os.environ["CUDA_CACHE_PATH"] = folder
    try:
        yield folder
    finally:
        if old is None:
            os.environ.pop("CUDA_CACHE_PATH", None)
        else:
            os.environ["CUDA_CACHE_PATH"] = old


class SweepBenches:
    """For --model-profile: each profile's explorations share one measuring bench, as a
    model sweep's problems do (one engine worker for every problem, kept), each bench's
    processes with a CUDA JIT cache of its own for the whole run (a sweep's processes
    keep what they compiled for the problems after; neither profile builds on the
    other's). Without it each exploration started an engine worker of its own, and its
    forward direction paid for the start (4-8 s on the H200)."""

    def __init__(self, device, labels):
        from cudnn_explorer.measure.pipeline import GpuBench

        self._dir = tempfile.TemporaryDirectory(prefix="bench_search_jit_")
        self.caches = {}
        self.benches = {}
        for label in labels:
            self.caches[label] = os.path.join(self._dir.name, label)
            os.makedirs(self.caches[label])
            self.benches[label] = GpuBench(device, keep_worker=True)

    @contextlib.contextmanager
    def using(self, label):
        """(the bench of ``label``'s profile, under its JIT cache)."""
        with jit_cache(self.caches[label]):
            yield self.benches[label]

    def close(self):
        for bench in self.benches.values():
            bench.close()
        self._dir.cleanup()


# The sources whose results a kept document holds (code_digest).
CODE_SOURCES = ("setup.py", "csrc", "cudnn_explorer", "scripts/bench_search.py")


def code_digest(root: str = ROOT) -> str:
    """The first 16 hex digits of the sha256 of CODE_SOURCES' files (their paths under
    ``root`` and their bytes; the package's and the extension's sources, no caches)."""
    h = hashlib.sha256()
    for top in CODE_SOURCES:
        base = os.path.join(root, top)
        files = [base] if os.path.isfile(base) else sorted(
            os.path.join(d, f) for d, dirs, fs in os.walk(base)
            for f in fs if f.endswith((".py", ".cpp", ".h", ".hpp", ".cu", ".cuh")))
        for path in files:
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as f:
                h.update(f.read() + b"\0")
    return h.hexdigest()[:16]


def kept_or(path, make, indent=None, code=None):
    """(the JSON document kept in ``path`` by a call before, True), else (make()'s, False),
    kept there as it finishes with ``code`` (code_digest) recorded in it (``path`` None:
    not kept). A kept document whose recorded code is not ``code`` is measured again
    (``code`` None: any is read, as --as-kept reads)."""
    if path and os.path.exists(path):
        with open(path) as f:
            doc = json.load(f)
        if code is None or doc.get("code") == code:
            return doc, True
        print(f"{path}: kept by other sources ({doc.get('code') or 'not recorded'}, these "
              f"are {code}): measured again", flush=True)
    doc = make()
    if path:
        write_atomic(path, json.dumps({**doc, "code": code}, indent=indent) + "\n")
    return doc, False


def explored(p, opts, kept=None, shared=None, label="", code=None):
    """(Exploration, wall s) of ``p`` under ``opts``: read from ``kept`` (a file path)
    where a call before wrote it, else measured, then written there. ``shared``: the
    SweepBenches whose bench of ``label`` measures it; without, its own processes, with an
    empty CUDA JIT cache, as a single problem's exploration runs."""
    import cudnn_explorer as ce
    from cudnn_explorer.core.exploration import Exploration

    def measure():
        with (shared.using(label) if shared else cold_jit_cache()) as bench:
            t0 = time.perf_counter()
            e = ce.explore(p, opts, bench=bench if shared else None)
            return {"wall_s": time.perf_counter() - t0, "exploration": e.to_dict()}

    d, _ = kept_or(kept, measure, code=code)
    return Exploration.from_dict(d["exploration"]), d["wall_s"]


def measure_problem(name, p, full, staged, worker=None, keep_stem=None, shared=None,
                    code=None) -> dict:
    """One problem explored by both profiles, then their best configs and PyTorch's pick
    timed again side by side (in ``worker``, see retimed): {"wall_s": {profile: s},
    "rows": [per direction]}. ``keep_stem``: each profile's exploration is kept in
    KEEP_STEM.PROFILE.json as it finishes (the quick one first), and read from there in a
    later call, so a call that ends during the thorough search loses only that search.
    ``shared``: SweepBenches (explored says what they change). ``code``: as kept_or's."""
    exps, walls, rows = {}, {}, []
    for label, opts in (("staged", staged), ("full", full)):
        kept = kept_path(keep_stem, label) if keep_stem else None
        exps[label], walls[label] = explored(p, opts, kept, shared, label, code)
        e = exps[label]
        parts = "; ".join(f"{d.direction} legacy {d.legacy_wall_s or 0:.1f} s, engines "
                          f"{d.engines_wall_s or 0:.1f} s" for d in e.directions)
        print(f"{name} {label}: {walls[label]:.1f} s (PyTorch's children "
              f"{e.pytorch_wall_s or 0:.1f} s; {parts})", flush=True)
    for d in exps["full"].directions:
        ds = exps["staged"].direction(d.direction)
        bf = d.engines.best(allowed_only=True) if d.engines else None
        bs = ds.engines.best(allowed_only=True) if ds and ds.engines else None
        pick = benchmark_pick(d, ds)
        if bf is None or bs is None:
            rows.append({"problem": name, "direction": d.direction, "error":
                         "no best config in one of the searches"})
            continue
        tags = [bf.tag, bs.tag] + ([pick.engine_tag] if pick and pick.engine_tag else [])
        again = retimed(p, d.direction, sorted(set(tags)), full, worker)
        row = {"problem": name, "direction": d.direction, "full_best": bf.tag,
               "staged_best": bs.tag, "full_ms": again.get(bf.tag),
               "staged_ms": again.get(bs.tag)}
        if row["full_ms"] and row["staged_ms"]:
            row["hit"] = row["staged_ms"] <= 1.02 * row["full_ms"]
        if pick and pick.engine_tag:
            row["pick"] = pick.engine_tag
            ratio = pick_ratio(d, ds, pick.engine_tag)
            if ratio is not None:
                row["pick_ratio"] = ratio
        row["finalist_ratios"] = finalist_ratios(d, ds)
        rows.append(row)
    return {"wall_s": walls, "rows": rows}


def benchmark_pick(full_dir, staged_dir):
    """The PyTorch benchmark pick whose two medians are compared: the quick search's own
    (a finalist there, so timed in full; the thorough search times every config it lists,
    and PyTorch's picks are among them), else the thorough one's. Each exploration runs
    PyTorch in processes of its own, and benchmark mode's pick can differ between
    processes: on the H200 the bfloat16 1x1 problem's forward pick did, and the thorough
    search's pick had left the quick search in a round, so no median of it was compared."""
    pick = staged_dir.pytorch_pick("benchmark") if staged_dir is not None else None
    return pick if pick is not None and pick.engine_tag else full_dir.pytorch_pick("benchmark")


def pick_ratio(full_dir, staged_dir, tag):
    """The quick search's median of config ``tag`` over the thorough one's (None where
    either did not time it in full)."""
    pf, ps = full_dir.config_timing(tag), staged_dir.config_timing(tag)
    ok = pf is not None and ps is not None and pf.median_ms > 0
    return ps.median_ms / pf.median_ms if ok else None


def finalist_ratios(full_dir, staged_dir) -> list:
    """The quick search's median over the thorough one's of every engine config both timed
    in full (the quick search's finalists, not WRONG), in the quick search's order: how far
    one plan's median moves between two searches of one process, the scale against which
    PyTorch's pick's 3% is read (docs/benchmarks.md, "The same answers")."""
    if staged_dir is None or staged_dir.engines is None:
        return []
    ratios = (pick_ratio(full_dir, staged_dir, c.tag) for c in staged_dir.engines.configs
              if c.left_round is None)
    return [round(r, 4) for r in ratios if r is not None]


def not_kept(name, path):
    """--as-kept's answer to a problem that is not kept: an error, nothing measured."""
    raise SystemExit(f"--as-kept: {name} is not kept ({path} is missing); kept problems are "
                     f"read, none measured")


def kept_path(stem: str, label: str) -> str:
    """Where profile ``label``'s exploration of a problem is kept: STEM.LABEL.json."""
    return f"{stem}.{label}.json"


def kept_finalist_ratios(rows, base) -> None:
    """Fill in the finalist_ratios of kept ``rows`` that lack them (kept by an earlier
    version of this script) from the two explorations kept beside them (BASE.staged.json,
    BASE.full.json), where both are there."""
    if not base or all("finalist_ratios" in r for r in rows):
        return
    paths = {label: kept_path(base, label) for label in ("staged", "full")}
    if not all(os.path.exists(q) for q in paths.values()):
        return
    from cudnn_explorer.core.exploration import Exploration

    exps = {}
    for label, q in paths.items():
        with open(q) as f:
            exps[label] = Exploration.from_dict(json.load(f)["exploration"])
    for r in rows:
        d = exps["full"].direction(r.get("direction"))
        if "finalist_ratios" not in r and d is not None:
            r["finalist_ratios"] = finalist_ratios(d, exps["staged"].direction(d.direction))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", default=",".join(PROBLEMS),
                    help=f"names among {', '.join(PROBLEMS)} (or 'none')")
    ap.add_argument("--model", default=None, help="also every problem of this model")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--amp", default="fp16")
    ap.add_argument("--channels-last", action="store_true")
    ap.add_argument("--eval", action="store_true")
    ap.add_argument("--limit", type=int, default=None, help="at most N of the model's problems")
    ap.add_argument("--budget-ms", type=float, default=100.0)
    ap.add_argument("--model-profile", action="store_true",
                    help="compare the model sweep's quick profile (only the engine configs "
                         "PyTorch's heuristics and fallbacks list, each timed in full with "
                         "its own budgets) with the same configs staged, instead of the "
                         "problem's thorough and quick profiles (--budget-ms unused)")
    ap.add_argument("--no-pytorch", action="store_true",
                    help="run no PyTorch children (no picks: the hit rate is a lower bound)")
    ap.add_argument("--config-timeout", type=float, default=None, metavar="S",
                    help="both profiles' --engine-config-timeout (default the tool's)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep each problem's result there; skip the problems kept")
    ap.add_argument("--as-kept", action="store_true",
                    help="with --keep: the totals of the kept results whatever sources "
                         "measured them; measure nothing")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    if a.as_kept and not a.keep:
        raise SystemExit("--as-kept: reads the results kept in --keep DIR; give --keep")

    import cudnn_explorer as ce
    from cudnn_explorer.core.options import ExploreOptions

    problems = []
    names = [] if a.problems == "none" else [n.strip() for n in a.problems.split(",") if n]
    for n in names:
        if n not in PROBLEMS:
            raise SystemExit(f"--problems {n}: valid: {', '.join(PROBLEMS)}")
        problems.append((n, ce.ConvProblem.create(**PROBLEMS[n])))
    if a.model:
        cap = ce.capture(a.model, batch=a.batch, amp=a.amp, channels_last=a.channels_last,
                         train=not a.eval)
        for i, u in enumerate(cap.problems[:a.limit]):
            problems.append((f"{a.model}#{i + 1}", u.problem))
    if a.model_profile:  # what a model sweep's quick profile runs, then the same staged
        staged = ExploreOptions.create().profiled("quick", model=True)
        full = staged.updated(staged=False)
    else:
        full = ExploreOptions.create(budget_ms=a.budget_ms).profiled("thorough")
        staged = full.profiled("quick")
    if a.no_pytorch:
        full, staged = full.updated(pytorch=False), staged.updated(pytorch=False)
    if a.config_timeout is not None:
        if not 0 < a.config_timeout <= 86400:
            raise SystemExit(f"--config-timeout {a.config_timeout:g}: a number of seconds > 0, "
                             f"at most 86400")
        full, staged = (o.updated(engine_config_timeout_s=a.config_timeout)
                        for o in (full, staged))
    rows, wall, walls = [], {"full": 0.0, "staged": 0.0}, {}
    code = None if a.as_kept else code_digest()
    if a.keep:
        os.makedirs(a.keep, exist_ok=True)
    worker = shared = None
    if problems and not a.as_kept:  # one engine worker re-times every direction's choices
        from cudnn_explorer.measure.engine_worker import EngineWorker

        worker = EngineWorker()
        if a.model_profile:
            shared = SweepBenches(full.device, ("staged", "full"))
    try:
        for name, p in problems:
            # the two comparisons keep their results apart
            stem = name.replace("/", "_") + (".model-profile" if a.model_profile else "") \
                + (".no-pytorch" if a.no_pytorch else "")
            base = os.path.join(a.keep, stem) if a.keep else None
            kept = base + ".json" if base else None
            one, was_kept = kept_or(kept, lambda: not_kept(name, kept) if a.as_kept else
                                    measure_problem(name, p, full, staged, worker, base,
                                                    shared, code),
                                    indent=1, code=code)
            if was_kept:
                print(f"{name}: kept in {kept}", flush=True)
                kept_finalist_ratios(one["rows"], base)
            rows += one["rows"]
            walls[name] = one["wall_s"]
            for label in wall:
                wall[label] += one["wall_s"][label]
    except KeyboardInterrupt:
        print(f"interrupted: the totals of the {len(walls)} problems that finished",
              flush=True)
    finally:
        if worker is not None:
            worker.close()
        if shared is not None:
            shared.close()
    scored = [r for r in rows if "hit" in r]
    hits = sum(r["hit"] for r in scored)
    picks = [r for r in rows if "pick_ratio" in r]
    pick_ok = sum(within_3pct(r["pick_ratio"]) for r in picks)
    out = {"compared": ("the model sweep's quick profile, unstaged (full) and staged"
                        if a.model_profile else "the thorough profile (full) and the quick one "
                                                "(staged)")
                       + (", without PyTorch's children (no picks)" if a.no_pytorch else ""),
           "problems": [n for n, _ in problems], "code": code, "wall_s": wall,
           "problem_wall_s": walls,
           "rows": rows,
           "hits": hits, "scored": len(scored), "pick_within_3pct": pick_ok,
           "picks": len(picks), "pick_ratios": pick_ratios(rows),
           "finalist_ratios": ratio_summary([x for r in rows
                                             for x in r.get("finalist_ratios", ())]),
           "checks": {"staged_within_2pct_in_95pct": bool(scored) and hits >= 0.95 * len(scored),
                      "pick_within_3pct": bool(picks) and pick_ok == len(picks)}}
    print(f"wall: full {wall['full']:.0f} s, staged {wall['staged']:.0f} s")
    print(f"staged best within 2% of the full search's: {hits} of {len(scored)}; "
          f"PyTorch's pick within 3%: {pick_ok} of {len(picks)}")
    print(pick_ratios_text(out["pick_ratios"]))
    print(finalist_ratios_text(out["finalist_ratios"]))
    for r in rows:
        if not r.get("hit", True) or "error" in r or not within_3pct(r.get("pick_ratio", 1)):
            print(f"miss: {json.dumps({k: v for k, v in r.items() if k != 'finalist_ratios'})}")
        elif "pick" in r and "pick_ratio" not in r:
            print(f"PyTorch's pick not compared (not timed in full by both searches): "
                  f"{r['problem']} {r['direction']} {r['pick']}")
    if a.json:
        write_atomic(a.json, json.dumps(out, indent=1) + "\n")
    return 0


def within_3pct(ratio: float) -> bool:
    """Whether a quick / thorough ratio is within 3% of 1 (1.03 itself is)."""
    return abs(ratio - 1) <= 0.03 + 1e-12


def ratio_summary(ratios) -> dict:
    """Quick / thorough ratios summed up: their count, median, least and greatest (None
    without any), and how many are more than 3% from 1."""
    ratios = sorted(ratios)
    if not ratios:
        return {"count": 0, "median": None, "min": None, "max": None, "beyond_3pct": 0}
    return {"count": len(ratios), "median": round(statistics.median(ratios), 4),
            "min": round(ratios[0], 4), "max": round(ratios[-1], 4),
            "beyond_3pct": sum(not within_3pct(x) for x in ratios)}


def pick_ratios(rows) -> dict:
    """PyTorch's pick's quick / thorough median over the rows that compared it:
    ratio_summary of them."""
    return ratio_summary(r["pick_ratio"] for r in rows if "pick_ratio" in r)


def pick_ratios_text(p: dict) -> str:
    """pick_ratios said: one line."""
    if not p["count"]:
        return "PyTorch's pick, quick / thorough median: none compared"
    return (f"PyTorch's pick, quick / thorough median, over the {p['count']} compared: "
            f"median {p['median']:.3f} (least {p['min']:.3f}, greatest {p['max']:.3f})")


def finalist_ratios_text(p: dict) -> str:
    """ratio_summary of the finalist ratios said: one line."""
    what = "the same config timed in full by both searches, quick / thorough median"
    if not p["count"]:
        return f"{what}: none compared"
    return (f"{what}, over {p['count']} configs: median {p['median']:.3f} (least "
            f"{p['min']:.3f}, greatest {p['max']:.3f}); {p['beyond_3pct']} more than 3% from 1")


if __name__ == "__main__":
    sys.exit(main())
