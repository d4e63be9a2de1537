"""The staged search's rounds and its one decision: which candidates stay for the next
round; and what a candidate that left says of it (StagedNotes). Pure Python;
measure/engines.py runs the rounds.

Note [staged search]: every candidate is first timed briefly (round 1); those far behind
the round's best leave, the rest are timed again with more samples (round 2), and those
still near the best are the finalists, timed with the full budget and checked against the
reference. A candidate leaves only when even the fast end of its noise is behind: its
median less twice its spread (IQR / median) is above ``keep_within`` times the round's
best median. The caller names the candidates that always stay (PyTorch's picks, the
heuristics' first, the fastest of each group a plan file may filter on), so that the
report re-times them properly. The thresholds come from three H200 sweeps
(docs/method.md): of 6,229 engine configs over 159 problem-directions, 17.3% were within
1.30x of their direction's best and 8.6% within 1.08x; the spread of a full-budget
timing was at most 0.78% for 95% of them and 2.2% for 99%.

Note [records checked]: before the final round, a candidate is checked against the
reference only when its time beats that of every candidate of its round timed before it
that is not WRONG (a record; :func:`is_record`). The round's best, and round 1's cutoff
(Note [cut launches]), are therefore always set by a checked candidate: a WRONG one, however
fast, sends none of the others away (:func:`bar_ms`). It leaves in the round it is found
in, with no ratio (it cannot rank), unless the caller names it: PyTorch's WRONG pick is
still timed in full, so that the report shows it properly, but it never sets a bar. Most
candidates never lead their round: of n in an order unrelated to their times, about
ln n + 0.58 are records (4.3 of 43, a ResNet-50 direction's listed configs), so this
costs a few checks per direction. (Before, engine
configs were not checked before the final round, so a WRONG fast one could send correct
ones away, and legacy rows were all checked in round 1: 642 checks in a ResNet-50 sweep.)
A candidate checked in an earlier round is not checked again before the final one.

Note [cut launches] (csrc/timing.cpp): in round 1, a candidate whose first launch and the
next one each take more than :func:`cutoff_ms` of the best median so far (``CUT_RATIO``
times it, and at least ``CUT_FLOOR_MS``) is timed no further: the second launch's time (a
replay of a CUDA graph of one launch where the plan can be captured, so that the host's
time to issue it is left out, as in every graph-timed row) is its one round-1 sample (the
first's includes module loading, so it only decides), and it leaves unless the caller
names it. Where the first launch's GPU time alone is surely over the cutoff (its events
less the host's time to issue it: Note [one-launch cut] in csrc/timing.cpp), that lower
bound is its sample and no second launch is taken. The first launch's events alone
cannot cut: in an H100 ResNet-50 sweep
(data/reference/h100-resnet50-b32-amp-fp16-nhwc.json.gz's rounds), 47
of the 1,964 configs that left round 1 uncut launched first above their cutoff with a
median below it (63.9 ms for a config of 0.013 ms), while the second launches of the 90
cut configs cost 1.18 s in all. Such a candidate is at least 3x the round's best, where
round 1 keeps up to 1.30x: a margin of 2.3x for the error of one launch's time, which
above 1 ms is far smaller (a launch's overhead is microseconds). On the H200's
default problem (32x3x224x224, 3x3), configs slower than that spent 14.8 s of round 1's
22.5 s of GPU time in their full sampling (ten or more launches each: the estimate, the
warm-up, the graph's warm launch and five samples).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Dict, Hashable, Iterable, List, Mapping, Optional, Tuple

from .options import TimingSpec

__all__ = ["Round", "ROUNDS", "Timed", "survivors", "round_timing", "final_timing",
           "FINAL_WARMUP_MS", "cutoff_ms", "CUT_RATIO", "CUT_FLOOR_MS", "run_limit_s",
           "RUN_LIMIT_FLOOR_S", "ROUND1_LIMIT_LAUNCHES", "bar_ms", "is_record", "decided",
           "skipped_round", "StagedNotes"]


@dataclass(frozen=True)
class Round:
    """One round before the finalists': its sampling budget, warm-up and one sample's GPU
    time (ms, each at most the full timing's), and how far behind the best (a ratio) a
    candidate may be and stay."""

    budget_ms: float
    warmup_ms: float
    keep_within: float
    sample_ms: float = 1.0


# Note [round 1's samples]: the native timer takes at least five samples (csrc/timing.h),
# so samples of the full timing's 1 ms made round 1 cost at least 5 ms of GPU time per
# candidate whatever its budget: on the H200, the 2,243 engine configs of a ResNet-50
# sweep that left after round 1 spent 13.8 s there, 6.2 ms each. Its samples are 0.1 ms
# (K launches replayed as one CUDA graph, K >= 1). Round 1 only ranks, keeping what is
# within 1.30x of the best (less twice its spread); 0.1 ms of replays is about 200 times
# the events' resolution (about 0.5 us). Kernels of 0.1 ms or more are one launch per
# sample either way.
#
# Note [round budgets]: the rounds are timed batched (Note [batched rounds] in
# csrc/timing.cpp: the sample count fixed from a graph-replay estimate, one
# synchronisation), so a round's GPU time is about its warm-up and budget: round 1
# five samples of 0.1 ms after 0.2 ms of warm-up, round 2 five of 0.5 ms after 0.5 ms.
# Their margins stay as chosen from data (1.30x and 1.08x, less twice the spread); a
# candidate whose few samples scatter has a wide spread, and so stays. Both rounds took
# more before, and an H100 ResNet-50 sweep's file says what that bought
# (data/reference/h100-resnet50-b32-amp-fp16-nhwc.json.gz; its rounds give
# these figures):
# - round 1 took five samples of 0.2 ms after 0.5 ms. Its 2,957 configs took 10.5 s, of
#   which about 5.5 s of GPU time in estimates, warm-ups and samples (the cut configs'
#   launches 2.4 s, the first launches 0.5 s): their launches took 0.026 ms (median; 0.13
#   ms at the 90th percentile), and the 1,964 that left uncut had spreads of 0.21%
#   (median), 1.1% (95th percentile) and 2.5% (99th), the nearest leaving at 1.304x the
#   best. The present round 1 takes about 3.0 s of GPU time for them, by the same records;
# - round 2 took eight samples after 1 ms. Its 903 configs took 5.2 s, about 5 ms of GPU
#   time each, and the 557 that left had spreads of 0.37% (median) and 1.05% (95th
#   percentile), the nearest leaving at 1.082x the best. Five samples (the native
#   timer's least) after 0.5 ms spare about 2 ms of GPU time a config.
# A spread of a percent or two moves no candidate across a margin of 30% or 8%. The
# finalists keep their 1 ms warm-up (Note [finalists' warm-up]). Measured afterwards, on
# another H100's fresh machine: round 1 took 7.6 s of that sweep, round 2 3.4 s, and the
# staged best was within 2% of the unstaged one in 81 of 81 problem-directions, 69 on an
# H200 and 12 on an H100 (docs/benchmarks.md, "The same answers").
ROUNDS = (Round(budget_ms=0.5, warmup_ms=0.2, keep_within=1.30, sample_ms=0.1),
          Round(budget_ms=2.5, warmup_ms=0.5, keep_within=1.08, sample_ms=0.5))


# Note [decided rounds]: a round after the first only chooses which candidates go on, so
# one that can send none of them away is not timed: when a single candidate is left, or
# every one left is named (it stays whatever its time). It is recorded with no candidate
# timed and why ("skipped"). In the H100 sweep of ResNet-50 (b32, AMP fp16) every one of the
# 68 directions had a single legacy row left after round 1, and timing it again in round 2
# took 0.74 s in all. Nothing else changes: the finalists are timed in full and checked,
# and a candidate's last time is still its final round's.
def decided(live: Iterable[Hashable], named: Iterable[Hashable]) -> Optional[str]:
    """Why a round after the first cannot send any of the ``live`` candidates away (each
    of ``named`` stays whatever its time), or None where it can. Note [decided rounds]."""
    live, named = list(live), set(named)
    if len(live) <= 1:
        return f"{len(live)} candidate left" if live else "no candidate left"
    if all(c in named for c in live):
        return "every candidate left is named, so each stays"
    return None


def skipped_round(number: int, why: str, **fields) -> dict:
    """The record of round ``number``, not timed (Note [decided rounds]), with the
    round's other ``fields`` (its budget, its margin)."""
    return {"round": number, **fields, "timed": 0, "left": 0, "wall_s": 0.0, "skipped": why}


# Note [finalists' warm-up]: a finalist was timed in every round before its final one
# (but a round it skipped: Note [decided rounds]), the last time moments before, in the
# same search: its kernels are loaded and the GPU is busy. Its full timing (the full
# budget, samples and eager loop) warms up for FINAL_WARMUP_MS (round 2's warm-up until
# round 2 took less: Note [round budgets]), not the full timing's 10 ms, which in a
# ResNet-50 sweep on the H200 cost as much as the 10 ms budget itself over its 490
# finalists (eager launches then; Note [warm-up replays] in csrc/timing.cpp). The first
# launch of every timing, which loads a module where one is not loaded yet, stays
# outside its samples.
FINAL_WARMUP_MS = 1.0


def final_timing(full: TimingSpec) -> TimingSpec:
    """The finalists' timing: the full one with FINAL_WARMUP_MS of warm-up (Note
    [finalists' warm-up])."""
    return replace(full, warmup_ms=min(FINAL_WARMUP_MS, full.warmup_ms))


def round_timing(full: TimingSpec, r: Round) -> TimingSpec:
    """A round's timing: the full one's method with the round's (smaller) budget, warm-up
    and samples, and no eager wall-clock loop (a round's times only rank; the finalists
    get the loop)."""
    return replace(full, budget_ms=min(r.budget_ms, full.budget_ms),
                   warmup_ms=min(r.warmup_ms, full.warmup_ms),
                   sample_ms=min(r.sample_ms, full.sample_ms), eager=False)


@dataclass(frozen=True)
class Timed:
    """A candidate's time in a round: its median (ms) and spread (IQR / median)."""

    median_ms: float
    spread: float = 0.0


def survivors(times: Mapping[Hashable, Timed], keep_within: float,
              always: Iterable[Hashable] = ()) -> Tuple[List[Hashable], Dict[Hashable, float]]:
    """(the candidates that stay, in the order given; {candidate that leaves: its median
    over the best median}) for one round (Note [staged search]). A candidate in
    ``always`` stays whatever its time; ties with the best stay."""
    keep = set(always)
    if not times:
        return [], {}
    best = min(t.median_ms for t in times.values())
    stay, left = [], {}
    for key, t in times.items():
        fast_end = t.median_ms * (1.0 - 2.0 * max(t.spread, 0.0))
        if key in keep or best <= 0 or fast_end <= keep_within * best:
            stay.append(key)
        else:
            left[key] = t.median_ms / best
    return stay, left


def bar_ms(timed: Iterable[Tuple[Optional[float], bool]]) -> Optional[float]:
    """What a candidate must beat to lead its round: the least time (ms) of ``timed``, the
    (time or None, WRONG) of those timed before it, among those not WRONG; None when there
    are none. Note [records checked]."""
    times = [t for t, wrong in timed if t is not None and not wrong]
    return min(times) if times else None


def is_record(median_ms: Optional[float], best_ms: Optional[float]) -> bool:
    """Whether a candidate just timed at ``median_ms`` (None: not timed) leads its round:
    faster than ``best_ms``, the best of those before it that are not WRONG (None: it is
    the first). Note [records checked]."""
    return median_ms is not None and (best_ms is None or median_ms < best_ms)


CUT_RATIO, CUT_FLOOR_MS = 3.0, 1.0


def cutoff_ms(best_ms) -> float:
    """Round 1's cutoff (ms) for the next candidate, given the best median so far (None:
    nothing timed yet, no cutoff: 0). Note [cut launches]."""
    if best_ms is None or best_ms <= 0:
        return 0.0
    return max(CUT_RATIO * best_ms, CUT_FLOOR_MS)


# Note [hung launches]: cuDNN accepts knob combinations whose launch never ends (on the
# H200, run-time compiled engines 69 and 77 with knob 17 = 3 or 5, on float16 channels_last
# 3x3 problems: docs/limits.md). The watchdog's limit for a config (--engine-config-timeout,
# 60 s) covers its plan's build, run-time compilation included, and its whole timing; four
# such configs cost 240 s of a quick search's 303 s on one problem. Once a round-1
# candidate's plan is built, it launches at most twice before it is cut (Note [cut
# launches]), so the watchdog waits ROUND1_LIMIT_LAUNCHES launches of the cutoff (3x the
# fastest config so far, at least 1 ms), and at least RUN_LIMIT_FLOOR_S for the host's part
# (capturing a graph, loading the kernels' modules): two launches of 1,000 cutoffs each,
# 3,000 times the best so far, which cannot rank. The slowest candidates measured on the
# H200 ran 1,232x their direction's best, about 410 cutoffs. A full timing (the thorough
# profile's, the finalists') keeps the whole timeout: its launch count grows with the
# budget and the eager loop, and some configs spend far more host time per call than
# GPU time (an FFT config with knob 11 = 1: 0.26 s of host time a call for 36 ms on the
# GPU; one depthwise config took 29 s to build, time and check). A config killed at the
# shorter limit is recorded as hung, with the limit it met. The floor was 10 s: on the
# H200 a 3-D float16 problem's quick search then spent 52-54 s of each backward
# direction's 62-64 s on four such configs (engines 69 and 77, knob 17 = 3, 5, 6, 7),
# about 10 s of waiting and 3 s for the worker's restart each. Those are now skipped as
# known (Note [known hangs] in core/hangs.py); for others, a round-1 candidate's launches
# otherwise take milliseconds (about 3-12 ms a config; the FFT configs whose calls cost
# 0.26 s of host time about 1 s, cut after two launches), so the floor is 3 s.
RUN_LIMIT_FLOOR_S, ROUND1_LIMIT_LAUNCHES = 3.0, 2_000


def run_limit_s(cutoff: float) -> float:
    """How long (s) the watchdog waits for the launches of a round-1 candidate timed with
    ``cutoff`` (ms, > 0), its plan built. Note [hung launches]."""
    return max(RUN_LIMIT_FLOOR_S, ROUND1_LIMIT_LAUNCHES * cutoff / 1000.0)


class StagedNotes:
    """What a record the staged search may have let go says of it (a mixin of
    core/records.py's legacy rows and engine configs; their fields ``left_round``,
    ``left_ratio``, ``timing`` and ``output_finite``; Note [staged search])."""

    @property
    def left_note(self) -> str:
        """"left after round 1 at 2.31x the best", or "" for a finalist."""
        if self.left_round is None:
            return ""
        t = self.timing
        cut = t is not None and t.method == "cut"
        # Note [one-launch cut] in csrc/timing.cpp: its sample is a lower bound
        one = cut and not t.warmup_launches
        ratio = "" if self.left_ratio is None else \
            f" at {self.left_ratio:.2f}x the best" + (" or more" if one else "")
        how = "" if not cut else " (cut after one launch)" if one else \
            " (cut after two launches)"
        return f"left after round {self.left_round}{ratio}{how}"

    @property
    def brief_note(self) -> str:
        """``left_note`` and what was measured of it: "... (timed briefly)", or "(timed
        briefly, not checked)" where it never led a round (Note [records checked]); ""
        for a finalist. Needs the field ``output_finite`` too."""
        if not self.left_note:
            return ""
        checked = "" if self.output_finite is not None else ", not checked"
        return f"{self.left_note} (timed briefly{checked})"
