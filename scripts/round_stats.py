"""What a staged search's rounds decided and what they cost, from a saved exploration or
model sweep (--json; gzip-compressed too): the figures behind Note [round budgets] and
Note [cut launches] in cudnn_explorer/core/staging.py.

For the engine configs of every direction (--legacy: the legacy rows instead):
- per round, the candidates that left there, cut ones apart: how many, their spreads
  (IQR / median) at the 50th, 95th and 99th percentiles, and the nearest to staying (the
  least ratio to the round's best);
- each round's GPU time, estimated from each candidate's median launch as
  csrc/timing.cpp's batched rounds launch it (three launches for the estimate, then
  replays of K launches: the warm-up's and at least five samples'), under each --round1
  and --round2 SAMPLE_MS,WARMUP_MS,BUDGET_MS (default: the present ROUNDS). A finalist's
  round-1 and round-2 times are not kept, so its final median stands in. Round 1's cut
  candidates (after two launches, or after one: Note [one-launch cut] in
  csrc/timing.cpp) and first launches are given apart;
- whether the first launch's time alone could cut: of the candidates that left round 1 uncut,
  how much longer their first launch (first_ms) took than their median, and how many
  launched first above their direction's cutoff (staging.cutoff_ms of its best
  finalist) with a median below it;
- what the engine configs' plan builds cost (build_ms): all of them, and the run-time
  compiled ones (behaviour note RUNTIME_COMPILATION) apart, where those left, in how
  many directions one was the best, and the slowest builds.

Usage: python scripts/round_stats.py FILE [--legacy] [--round1 0.2,0.5,1.0]
           [--round1 0.1,0.2,0.5] [--round2 0.5,1.0,4.0] [--round2 0.5,0.5,2.5]
"""
import argparse
import math
import os
import sys
from typing import Iterable, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from cudnn_explorer.core.documents import saved_explorations  # noqa: E402
from cudnn_explorer.core.errors import ExplorerError  # noqa: E402
from cudnn_explorer.core.staging import ROUNDS, cutoff_ms  # noqa: E402

MIN_SAMPLES, ESTIMATE_LAUNCHES = 5, 3  # csrc/timing.h, Note [batched rounds]


def round_gpu_ms(median_ms: float, sample_ms: float, warmup_ms: float,
                 budget_ms: float) -> float:
    """A batched round's GPU time (ms) for a launch of ``median_ms``: the estimate's three
    launches, then replays of K = ceil(sample / median) launches, enough to warm up for
    ``warmup_ms`` (at least one) and to fill ``budget_ms`` (at least five samples)."""
    k = max(1, math.ceil(sample_ms / median_ms))
    per = median_ms * k
    warm = max(1, math.ceil(warmup_ms / per))
    n = max(MIN_SAMPLES, math.ceil(budget_ms / per))
    return median_ms * ESTIMATE_LAUNCHES + (warm + n) * per


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values``, the nearest rank below: a value that occurred
    (core.stats.quantile interpolates between two)."""
    s = sorted(values)
    return s[int(q * (len(s) - 1))]


def candidates(exploration, legacy: bool) -> Iterable[Tuple[object, List]]:
    """(direction, its timed candidates: engine configs, or legacy rows) of an
    exploration."""
    for d in exploration.directions:
        if legacy:
            yield d, [r for r in d.find if r.timing is not None]
        elif d.engines is not None:
            yield d, [c for c in d.engines.configs if c.timing is not None]


def rounds_of(d, legacy: bool) -> List[dict]:
    """The direction's recorded rounds: its legacy rows' or its engine configs'."""
    return (d.legacy_rounds if legacy else (d.engines.rounds if d.engines else [])) or []


def round_timed(d, legacy: bool, number: int) -> bool:
    """Whether the direction's round ``number`` was timed (Note [decided rounds]: not
    when it could send no candidate away)."""
    for r in rounds_of(d, legacy):
        if r.get("round") == number:
            return not r.get("skipped")
    return False


def parse_round(text: str) -> Tuple[float, float, float]:
    try:
        sample, warm, budget = (float(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: valid: SAMPLE_MS,WARMUP_MS,BUDGET_MS, e.g. 0.1,0.2,0.5") from None
    if not all(math.isfinite(v) and v > 0 for v in (sample, warm, budget)):
        raise argparse.ArgumentTypeError(f"{text!r}: each of the three must be a number "
                                         f"above 0")
    return sample, warm, budget


def stats(explorations, legacy: bool, round1: Sequence[Tuple[float, float, float]],
          round2: Sequence[Tuple[float, float, float]]) -> List[str]:
    """The report's lines (the module's docstring says what they hold)."""
    left = {1: [], 2: []}  # (ratio, spread) of those that left uncut
    cut: List = []
    in_round = {1: [], 2: []}  # medians of the candidates each round timed
    first_over, first_extra, first_ms = [], [], 0.0
    directions, staged = 0, False
    for x in explorations:
        for d, cands in candidates(x, legacy):
            if not cands:
                continue
            directions += 1
            staged = staged or bool(rounds_of(d, legacy))
            finals = [c.timing.median_ms for c in cands
                      if c.left_round is None and c.timing.median_ms]
            bar = cutoff_ms(min(finals)) if finals else None
            r2 = round_timed(d, legacy, 2)
            for c in cands:
                t = c.timing
                if t.method == "cut":
                    cut.append(t)
                    continue
                in_round[1].append(t.median_ms)
                if c.left_round in (1, 2) and c.left_ratio is not None:
                    left[c.left_round].append((c.left_ratio, t.spread or 0.0))
                if c.left_round == 2 or (c.left_round is None and r2):
                    in_round[2].append(t.median_ms)
                if c.left_round == 1 and t.first_ms is not None:
                    first_extra.append(t.first_ms - t.median_ms)
                    first_ms += t.first_ms
                    if bar and t.first_ms > bar > t.median_ms:
                        first_over.append((t.first_ms, t.median_ms, c.tag if not legacy
                                           else f"{c.algo_name} ({c.math_type})"))
    what = "legacy rows" if legacy else "engine configs"
    if not staged:
        return [f"{what} of {directions} directions: no rounds recorded (not a staged search)"]
    # Note [one-launch cut] in csrc/timing.cpp: no warm launch (its sample the first's bound)
    two = [t for t in cut if t.warmup_launches]
    one = len(cut) - len(two)
    cuts = f"{len(two)} cut after two launches" + (f", {one} after one" if one else "")
    out = [f"{what} of {directions} directions: {len(in_round[1]) + len(cut)} timed in "
           f"round 1 ({cuts}), {len(in_round[2])} in round 2"]
    for n in (1, 2):
        got = left[n]
        if not got:
            out.append(f"round {n}: none left uncut with a ratio")
            continue
        spreads = [s for _, s in got]
        out.append(f"round {n}: {len(got)} left uncut; spread p50 {quantile(spreads, .5):.2%}, "
                   f"p95 {quantile(spreads, .95):.2%}, p99 {quantile(spreads, .99):.2%}; "
                   f"nearest to staying at {min(r for r, _ in got):.3f}x the best")
    for n, params in ((1, round1), (2, round2)):
        for sample, warm, budget in params:
            gpu = sum(round_gpu_ms(m, sample, warm, budget) for m in in_round[n] if m)
            out.append(f"round {n} GPU time, samples of {sample:g} ms after {warm:g} ms "
                       f"of warm-up, a {budget:g} ms budget: about {gpu / 1e3:.2f} s "
                       f"({len(in_round[n])} candidates, cut ones apart)")
    firsts = sum(t.first_ms or 0.0 for t in cut) / 1e3
    seconds = sum(t.median_ms for t in two) / 1e3
    out.append(f"round 1's cut candidates: {len(cut)}, their launches {firsts + seconds:.2f} s "
               f"(the second ones {seconds:.2f} s" + (f"; {one} cut after the first alone"
                                                      if one else "") + ")")
    if first_extra:
        out.append(f"first launches of the {len(first_extra)} that left round 1 uncut: "
                   f"{first_ms / 1e3:.2f} s, each its median plus {quantile(first_extra, .5):.3f} "
                   f"ms (p50), {quantile(first_extra, .99):.3f} ms (p99), "
                   f"{max(first_extra):.3f} ms (max); {len(first_over)} launched first above "
                   f"their direction's cutoff with a median below it")
        for f, m, tag in sorted(first_over, reverse=True)[:5]:
            out.append(f"  {tag}: first launch {f:.2f} ms, median {m:.4f} ms")
    else:
        out.append("no first launches recorded (a file from before first_ms)")
    return out


RTC = "RUNTIME_COMPILATION"  # cuDNN's behaviour note: the plan's kernel is compiled at build


def where_left(c, staged: bool) -> str:
    """Where a config left: "round N" or "finalist" in a staged search, "unstaged" in
    one that was not."""
    if not staged:
        return "unstaged"
    return "finalist" if c.left_round is None else f"round {c.left_round}"


def builds(explorations, slowest: int = 5) -> List[str]:
    """The plan builds' lines (the module's docstring says what they hold)."""
    built: List[Tuple[object, str]] = []  # (config, where it left)
    best_rtc, directions = 0, 0
    for x in explorations:
        for d in x.directions:
            if d.engines is None:
                continue
            directions += 1
            staged = bool(d.engines.rounds)
            built += [(c, where_left(c, staged)) for c in d.engines.configs
                      if c.build_ms is not None]
            best = d.engines.best()
            best_rtc += best is not None and RTC in best.behavior_notes
    if not built:
        return ["plan builds: none recorded"]

    def seconds(got) -> str:
        return f"{sum(c.build_ms for c, _ in got) / 1e3:.1f} s"

    rtc = [(c, p) for c, p in built if RTC in c.behavior_notes]
    out = [f"plan builds: {len(built)} engine configs built in {seconds(built)}"]
    if not rtc:
        out.append("run-time compiled configs: none built")
    else:
        ms = [c.build_ms for c, _ in rtc]
        out.append(f"run-time compiled configs: {len(rtc)} built in {seconds(rtc)} "
                   f"({min(ms):.0f} to {max(ms):.0f} ms each); {best_rtc} of {directions} "
                   f"directions' best configs are run-time compiled")
        # the rounds in order, then the finalists, then an unstaged search's
        for place in sorted({p for _, p in rtc}, key=lambda p: (not p.startswith("round"), p)):
            got = [(c, p) for c, p in rtc if p == place]
            ratios = [c.left_ratio for c, _ in got if c.left_ratio is not None]
            span = f" at {min(ratios):.2f}x to {max(ratios):.2f}x the best" if ratios else ""
            what = {"finalist": "finalists", "unstaged": "in an unstaged search"}.get(
                place, f"left in {place}")
            out.append(f"  {what}: {len(got)}, built in {seconds(got)}{span}")
    if slowest > 0:
        out.append(f"the {min(slowest, len(built))} slowest builds:")
    for c, place in sorted(built, key=lambda cp: -cp[0].build_ms)[:slowest]:
        ratio = f" at {c.left_ratio:.2f}x the best" if c.left_ratio is not None else ""
        compiled = " (run-time compiled)" if RTC in c.behavior_notes else ""
        out.append(f"  {c.tag}: {c.build_ms:.0f} ms{compiled}, {place}{ratio}")
    return out


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file")
    ap.add_argument("--legacy", action="store_true", help="the legacy rows' rounds")
    ap.add_argument("--round1", type=parse_round, action="append",
                    help="SAMPLE_MS,WARMUP_MS,BUDGET_MS (repeatable)")
    ap.add_argument("--round2", type=parse_round, action="append",
                    help="SAMPLE_MS,WARMUP_MS,BUDGET_MS (repeatable)")
    a = ap.parse_args(argv)
    present = [(r.sample_ms, r.warmup_ms, r.budget_ms) for r in ROUNDS]
    try:
        explorations = saved_explorations(a.file, "FILE")
    except ExplorerError as e:
        print(f"round_stats: {e}", file=sys.stderr)
        return 2
    lines = stats(explorations, a.legacy, a.round1 or [present[0]], a.round2 or [present[1]])
    for line in lines + ([] if a.legacy else builds(explorations)):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
