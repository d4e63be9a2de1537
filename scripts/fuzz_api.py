"""API fuzz: random valid and invalid problems through ``cudnn_explorer.explore``.

Every call must either return an Exploration or raise one of the project's errors
(cudnn_explorer.core.errors); anything else, or a dead process, is a failure. Problems run
in worker processes, each writing one JSON line per problem before and after it, so that a
crash names the problem that caused it; the driver starts a new worker after the crashed
problem and goes on.

    python scripts/fuzz_api.py --count 10000 --out fuzz.jsonl [--device 0] [--seed 1]

Valid problems are small (Find, with a 1 ms re-timing on a few), so that 10,000 take
minutes; invalid ones break one field or one option at a time. Exit status 0 when there
were no failures, 1 otherwise; the summary goes to stdout.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JUNK = [None, -1, 0, 2**31, 2**63, 10**30, 1.5, float("nan"), "x", "", True, [], [1, 2, 3, 4, 5, 6],
        (3, 3, 3, 3)]


def _divisors(n):
    return [d for d in range(1, n + 1) if n % d == 0]


def random_case(rng: random.Random, i: int) -> dict:
    """One call: problem keywords and option keywords, valid or broken in one place."""
    nsp = rng.choice([1, 2, 2, 2, 3])
    spatial = [rng.randint(1, 40 if nsp < 3 else 12) for _ in range(nsp)]
    c = rng.choice([1, 2, 3, 4, 8, 16, 32, 64, 96])
    groups = rng.choice(_divisors(c)) if rng.random() < 0.3 else 1
    out = groups * rng.randint(1, max(1, 64 // groups))
    kernel = [rng.randint(1, min(7, s + 2)) for s in spatial]
    prob = dict(shape=[rng.randint(1, 8), c] + spatial, out_channels=out, kernel=kernel,
                stride=[rng.randint(1, 3) for _ in spatial],
                padding=[k // 2 + rng.randint(0, 1) for k in kernel],
                dilation=[rng.choice([1, 1, 2]) for _ in spatial], groups=groups,
                dtype=rng.choice(["float32", "float16", "bfloat16", "float64"]),
                layout="nchw" if nsp == 1 else rng.choice(["nchw", "nhwc"]))
    if prob["dtype"] == "float32":
        prob["tf32"] = rng.choice([None, True, False])
    opts = dict(directions=rng.choice(["fwd", "bwd-data", "bwd-filter"]), retime=False,
                check=rng.random() < 0.1, engines=False, pytorch=False, seed=i,
                device=0)
    if rng.random() < 0.05:
        opts.update(retime=True, budget_ms=1.0)
    if rng.random() < 0.05:
        opts["max_workspace_mib"] = rng.choice([0, 0.5, 4])
    kind = "valid"
    r = rng.random()
    if r < 0.35:  # break one problem field
        key = rng.choice(list(prob))
        prob[key] = rng.choice(JUNK)
        kind = f"bad {key}"
    elif r < 0.45:  # break one option
        key = rng.choice(["budget_ms", "seed", "max_workspace_mib", "directions", "retime",
                          "engine_configs", "child_timeout_s", "benchmark_limit", "bogus"])
        opts[key] = rng.choice(JUNK)
        kind = f"bad option {key}"
    return dict(i=i, kind=kind, problem=prob, options=opts)


def run_case(case: dict, device: int) -> dict:
    from cudnn_explorer import explore
    from cudnn_explorer.core.errors import ExplorerError, UserError
    from cudnn_explorer.core.problem import ConvProblem

    t0 = time.perf_counter()
    validated = False
    try:
        kw = dict(case["problem"])
        problem = ConvProblem.create(kw.pop("shape"), **kw)
        validated = True
        exp = explore(problem, **{**case["options"], "device": device})
        outcome = "ok" if all(d.find for d in exp.directions) else "ok (no rows)"
    except ExplorerError as e:
        outcome = type(e).__name__
        msg = str(e)
        if validated and case["kind"] == "valid" and isinstance(e, UserError):
            # the problem and the options validated: the native side disagreeing is a defect
            outcome = f"FAILURE valid problem refused ({outcome})"
    except Exception as e:  # noqa: BLE001  (the thing being looked for)
        outcome = f"FAILURE {type(e).__name__}"
        msg = str(e)
    else:
        msg = ""
    return dict(i=case["i"], kind=case["kind"], outcome=outcome, message=msg[:300],
                seconds=round(time.perf_counter() - t0, 4))


def worker(first: int, count: int, seed: int, device: int) -> None:
    """Cases first..first+count-1: a "start" line before each, the result line after."""
    for i in range(first, first + count):
        case = random_case(random.Random(seed * 1_000_003 + i), i)
        print(json.dumps({"start": i, "case": case}, default=str), flush=True)
        print(json.dumps(run_case(case, device), default=str), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--out", default="fuzz_api.jsonl")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        try:
            worker(a.first, a.count, a.seed, a.device)
        except KeyboardInterrupt:  # the parent was interrupted too, and reports
            return 130
        return 0
    results, crashes = [], []
    i, end = a.first, a.first + a.count
    t0 = time.time()
    interrupted = False
    try:
        run_all(a, results, crashes, i, end, t0)
    except KeyboardInterrupt:  # a time limit: report what finished
        interrupted = True
    counts = {}
    for r in results:
        counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
    failures = [r for r in results if r["outcome"].startswith("FAILURE")]
    print(f"{len(results)} calls{' (interrupted)' if interrupted else ''} in "
          f"{time.time() - t0:.0f} s; outcomes: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])))
    for r in failures[:20]:
        print(f"  FAILURE case {r['i']} ({r['kind']}): {r['outcome']}: {r['message']}")
    return 1 if failures or interrupted else 0


def run_all(a, results, crashes, i, end, t0):
    """Workers over cases i..end-1, a new one after each crash; results as they come."""
    with open(a.out, "w") as log:
        while i < end:
            p = subprocess.Popen([sys.executable, __file__, "--worker", "--first", str(i),
                                  "--count", str(end - i), "--seed", str(a.seed),
                                  "--device", str(a.device)], stdout=subprocess.PIPE,
                                 text=True, cwd=REPO)
            started = None
            for line in p.stdout:
                rec = json.loads(line)
                if "start" in rec:
                    started = rec
                    continue
                results.append(rec)
                log.write(json.dumps(rec) + "\n")
                started = None
                i = rec["i"] + 1
                if len(results) % 500 == 0:
                    print(f"fuzz: {len(results)} of {a.count} in {time.time() - t0:.0f} s",
                          file=sys.stderr, flush=True)
            rc = p.wait()
            if started is not None:  # the worker died inside this case
                crash = dict(i=started["start"], kind=started["case"]["kind"],
                             outcome=f"FAILURE process died (exit {rc})",
                             message=json.dumps(started["case"])[:300], seconds=None)
                crashes.append(crash)
                results.append(crash)
                log.write(json.dumps(crash) + "\n")
                i = started["start"] + 1
            elif rc != 0 and i < end:
                raise SystemExit(f"fuzz: worker exited {rc} between cases")
            log.flush()


if __name__ == "__main__":
    sys.exit(main())
