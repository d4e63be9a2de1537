"""The advisor's report: per input size, what benchmark mode costs and saves, the expected
totals for the workload, the break-even count and the verdict. Pure Python."""
from __future__ import annotations

import statistics
from dataclasses import replace
from typing import List, Optional

from ..core.advice import (PLAN_CACHE_LIMIT, Advice, comparable, pinned_difference,
                           plans_needed, steady_difference, verdict)
from ..core.choices import TIE
from .format import describe_environment, grouped_rows, short_tag, table, wrap
from .model import render_model_run

__all__ = ["render_advice"]


def _gib(b: int) -> str:
    return f"{b / 2**30:.2f}"


def _steady_method(run, costs) -> List[str]:
    """How the steady iterations behind the saving were timed, per size (graph or eager,
    and why), and with a graph, the same step run eagerly on and off."""
    on, off = run.mode("benchmark"), run.mode("heuristic")
    graph, eager = [], []
    for c, a, b in zip(costs, on.sizes, off.sizes):
        ta, tb = a.steady, b.steady
        # why eager; with a graph, a capture that failed once (Note [failed capture])
        why = "; ".join(dict.fromkeys(t.note for t in (ta, tb) if t.note))
        if c.method == "graph":
            both = ta.eager_ms and tb.eager_ms
            graph.append(f"{c.size}" + (f": {ta.eager_median_ms:.2f}/{tb.eager_median_ms:.2f}"
                                        if both else "") + (f" ({why})" if why else ""))
        else:
            eager.append(f"{c.size}" + (f" ({why})" if why else ""))
    lines = []
    if graph:
        lines += wrap("steady iterations: replays of a CUDA graph of the whole step, the GPU's "
                      "time without the host's; timed in a second fresh process per mode, "
                      "whose benchmark search is its own; the same step run eagerly there "
                      "(host time included), median ms on/off, " + "; ".join(graph), "- ")
    if eager:
        lines += wrap("steady iterations run eagerly, between CUDA events, host time "
                      "included, for size " + "; ".join(eager), "- ")
    return lines


def render_advice(adv: Advice) -> str:
    cap, run = adv.capture, adv.pytorch_run
    costs = adv.costs()
    n = adv.iterations
    lines = [f"model: {cap.model.describe()}"]
    lines += wrap("environment: " + describe_environment(adv.environment))
    lines += wrap(f"workload: {n} iterations over {len(costs)} input size"
                  f"{'s' if len(costs) > 1 else ''}; each mode measured in its own fresh "
                  f"process (benchmark at PyTorch's limit, heuristics = benchmark off)", "")
    spread = max((len(c.process_means_on) for c in costs), default=0)
    lines += wrap(f"95% CI: the noise within each process and the spread between the "
                  f"{spread} processes with benchmark on (the run and its repeats)"
                  if spread >= 2 else
                  "95% CI: the noise within each process only; how much one process's "
                  "steady iterations differ from another's (CPU placement, other load) is "
                  "not in it: " + ("no repeat has steady times of the same method to "
                                   "compare"
                                   if adv.repeats is not None else
                                   "--repeats K measures that too"), "")
    rows, pin_rows = [], []
    for c in costs:
        d, lo, hi = steady_difference([replace(c, share=1.0)])
        rows.append([str(c.size), f"{100 * c.share:.1f}%", f"{c.overhead_on_ms:.0f}",
                     f"{c.overhead_off_ms:.0f}", f"{c.mean_on:.2f}", f"{c.mean_off:.2f}",
                     f"{100 * d / c.mean_off:+.1f}% [{100 * lo / c.mean_off:+.1f}, "
                     f"{100 * hi / c.mean_off:+.1f}]",
                     f"{len(c.steady_on)}/{len(c.steady_off)}",
                     _gib(c.peak_on_bytes), _gib(c.peak_off_bytes)])
        if c.has_pinned:
            row = [str(c.size), f"{c.overhead_pinned_ms:.0f}", f"{c.mean_pinned:.2f}"]
            for against in ("off", "on"):
                pd, plo, phi = pinned_difference([replace(c, share=1.0)], against)
                base = c.mean_off if against == "off" else c.mean_on
                row.append(f"{100 * pd / base:+.1f}% [{100 * plo / base:+.1f}, "
                           f"{100 * phi / base:+.1f}]")
            pin_rows.append(row + [str(len(c.steady_pinned)), _gib(c.peak_pinned_bytes)])
    lines.append("")
    lines += wrap("per input size: the first iteration's cost beyond a steady one (ms, paid "
                  "once per new size per process), the steady iteration's mean (ms), what "
                  "benchmark mode saves per iteration (95% CI), iterations timed on/off, and "
                  "the first iteration's peak reserved memory (GiB):", "")
    lines.append(table(rows, headers=["size", "share", "1st on", "1st off", "on ms", "off ms",
                                      "saving [95% CI]", "n on/off", "peak on",
                                      "peak off"]))
    if pin_rows:
        lines += wrap("pinned to the plan file, per input size: the same, and what pinning "
                      "saves per iteration against benchmark off and on (95% CI):", "")
        lines.append(table(pin_rows, headers=["size", "1st pin", "pin ms", "vs off [95% CI]",
                                              "vs on [95% CI]", "n pin", "peak pin"]))
    lines += _steady_method(run, costs)
    v = verdict(costs, n)
    lines.append("")
    lines.append(f"== verdict for {n} iterations: "
                 + {"on": "turn benchmark mode ON", "off": "leave benchmark mode OFF",
                    "bucket": "bucket your input sizes",
                    "pinned": "PIN the plan file (cudnn_explorer.pin)"}[v.choice])
    lines += wrap(v.reason, "- ")
    lines += wrap(f"expected total: {v.total_on_ms / 1e3:.1f} s with benchmark on, "
                  f"{v.total_off_ms / 1e3:.1f} s with it off"
                  + (f"; padded to {', '.join(map(str, v.bucketing.sizes))} with it on: "
                     f"{v.bucketing.total_ms / 1e3:.1f} s" if v.bucketing else "")
                  + (f"; pinned: {v.total_pinned_ms / 1e3:.1f} s" if v.total_pinned_ms
                     is not None else ""), "- ")
    lines += wrap(f"steady saving with benchmark on: {v.saving_ms:+.2f} ms per iteration "
                  f"(95% CI {v.saving_low_ms:+.2f} to {v.saving_high_ms:+.2f})", "- ")
    lines += wrap("break-even: " + (f"benchmark on pays for its first calls after "
                                    f"{v.break_even} iterations" if v.break_even else
                                    "never (benchmark on is not faster in steady state)"),
                  "- ")
    lines += _pinned_lines(adv, costs, v)
    peak_on = max(c.peak_on_bytes for c in costs)
    peak_off = max(c.peak_off_bytes for c in costs)
    lines += wrap(f"peak memory of the first iteration (reserved): {_gib(peak_on)} GiB with "
                  f"benchmark on, {_gib(peak_off)} GiB off", "- ")
    (fwd, bwd), (fwd1, bwd1) = plans_needed(cap)
    several = (fwd, bwd) != (fwd1, bwd1)
    lines += wrap(f"plans: {'one pass over the sizes' if several else 'the workload'} needs "
                  f"{fwd} plans in the forward pass (the calling thread's cache) and {bwd} in "
                  f"the backward pass (the autograd thread's)"
                  + (f", one size at most {fwd1} and {bwd1}" if several else "")
                  + f"; PyTorch keeps up to {PLAN_CACHE_LIMIT} per thread "
                  f"(TORCH_CUDNN_V8_API_LRU_CACHE_LIMIT, left at that default here), so a "
                  f"size's first calls are paid once per process. Below one size's need, "
                  f"calls plan again in every iteration (a plan used once per iteration is "
                  f"evicted before its next use)"
                  + ("; below the whole workload's, each time an evicted size comes back"
                     if several else "") + "; a negative limit caches nothing", "- ")
    det, bench = run.mode("deterministic"), run.mode("benchmark")
    if det is not None and bench is not None:
        pairs = [comparable(a.steady, b.steady) for a, b in zip(det.sizes, bench.sizes)
                 if a.steady and b.steady]
        pairs = [(statistics.median(x), statistics.median(y), m) for x, y, m in pairs
                 if x and y]
        if len(pairs) == len(costs):
            w = [c.share for c in costs]
            dm = sum(s * a for s, (a, _, _) in zip(w, pairs))
            bm = sum(s * b for s, (_, b, _) in zip(w, pairs))
            how = sorted({m for _, _, m in pairs})
            lines += wrap(f"deterministic mode: {dm:.2f} ms per iteration vs {bm:.2f} ms with "
                          f"benchmark on ({100 * (dm / bm - 1):+.1f}%, medians weighted by "
                          f"share; {' and '.join(how)} steps)", "- ")
    if adv.repeats is not None:
        lines += ["", render_stability(adv).rstrip("\n")]
    lines += ["", render_model_run(run, cap).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _pinned_lines(adv: Advice, costs, v) -> List[str]:
    """The pinned mode: what it saves against each mode, how much of the plans' predicted
    gain it realised, and the calls it did not pin."""
    if not any(c.has_pinned for c in costs):
        return []
    lines = []
    if v.pinned_vs_off is not None:
        (d0, l0, h0), (d1, l1, h1) = v.pinned_vs_off, v.pinned_vs_on
        lines += wrap(f"steady saving pinned: {d0:+.2f} ms per iteration against benchmark "
                      f"off (95% CI {l0:+.2f} to {h0:+.2f}), {d1:+.2f} against it on (95% CI "
                      f"{l1:+.2f} to {h1:+.2f})", "- ")
        lines += _predicted_lines(adv.plans_predicted_ms, costs, d1)
    else:
        missing = [str(c.size) for c in costs if not c.has_pinned]
        lines += wrap(f"pinned: no steady time at size {', '.join(missing)}; not weighed", "- ")
    m = adv.pytorch_run.mode("pinned")
    on = "on" if m is not None and m.label.endswith("benchmark on)") else "off"
    for c in costs:
        if c.has_pinned and c.fallback_calls:
            lines += wrap(f"pinned, size {c.size}: {c.fallback_calls} of "
                          f"{c.pinned_calls + c.fallback_calls} convolution calls of the first "
                          f"iteration not pinned (the plan file does not cover them, or "
                          f"refused their plans); they ran with benchmark {on}", "- ")
    return lines


def _predicted_lines(predicted: Optional[float], costs, realised: float) -> List[str]:
    """How much of the plans' predicted gain over benchmark mode's picks the steady step
    realised (``realised``: ms per iteration against benchmark on, weighted by share). The
    file's prediction sums its entries over one iteration at each of its sizes; the
    entries do not say which size they serve, so with several sizes it is a mean per
    iteration only where the sizes have equal shares."""
    if not predicted:
        return []
    n = len(costs)
    per = predicted if n == 1 else predicted / n
    if n > 1 and max(c.share for c in costs) - min(c.share for c in costs) > 1e-9:
        return wrap(f"the plans' sweep predicted {predicted:.3f} ms over one iteration at each "
                    f"of the {n} sizes over benchmark mode's picks; not compared with the "
                    f"steady step, whose sizes have unequal shares", "- ")
    over = "per iteration" if n == 1 else (f"over one iteration at each of the {n} sizes, "
                                           f"{per:.3f} ms per iteration at their equal shares")
    return wrap(f"the plans' sweep predicted {predicted:.3f} ms {over} over benchmark mode's "
                f"picks; the steady step realised {realised:+.3f} ms "
                f"({100 * realised / per:.0f}%; benchmark mode's picks in this run are this "
                f"run's own)", "- ")


def render_stability(adv: Advice) -> str:
    """How often each plan was PyTorch's pick over the repeated fresh processes, and what
    the difference between those plans costs."""
    runs = [m for m in adv.repeats.modes if m.ok]
    st = adv.stability
    unstable = [s for s in st if not s.stable]
    lines = [f"== pick stability: {len(runs)} fresh processes with benchmark on "
             f"({len(adv.repeats.modes) - len(runs)} failed)"]
    lines += wrap(f"PyTorch picked the same plan every time for {len(st) - len(unstable)} "
                  f"of {len(st)} problem-directions (first input size)", "- ")
    rows = []
    lottery = 0
    cap = adv.capture
    for s in unstable:
        u = cap.problems[s.problem]
        spread = s.spread
        if spread is not None and spread > TIE:
            lottery += 1
        rows += grouped_rows(  # a row per plan
            [f"#{s.problem + 1}", s.direction, u.layers[0] if u.layers else ""],
            [[short_tag(t, 44), f"x{n}", f"{s.times[t]:.4f}" if t in s.times else "-"]
             for t, n in s.counts.items()],
            ["-" if spread is None else f"{100 * spread:.1f}%"])
    if rows:
        lines += wrap("where it differs: each plan, how often it was picked and its "
                      "steady-state median re-timed here (ms); spread = slowest / fastest - 1:",
                      "- ")
        lines.append(table(rows, headers=["#", "dir", "layer", "plan", "picked", "ms",
                                          "spread"]))
        lines += wrap(f"benchmark mode is a lottery for {lottery} of these: its picks differ "
                      f"by more than {100 * TIE:.0f}% in steady time, because PyTorch times "
                      f"each candidate once" if lottery else
                      f"the plans picked differ by at most {100 * TIE:.0f}% in steady time "
                      f"where they were timed: a tie, not a lottery", "- ")
    return "\n".join(lines) + "\n"
