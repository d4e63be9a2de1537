"""Text reports of a model: its captured convolutions, and a sweep's per-iteration view.

Per unique problem and direction: PyTorch's benchmark pick, the best legacy algorithm and
the best engine config, each in ms per call (steady-state median) and in ms per iteration
(times the calls one iteration makes). Model totals and the layers where PyTorch leaves
the most time follow, then PyTorch's own run of the model per mode: its first iteration
(time, peak memory, the call that set the peak) and its steady iterations. Pure Python:
renders a saved sweep without a GPU.
"""
from __future__ import annotations

from typing import List, Optional

from ..core.analysis import NOISY_SPREAD
from ..core.capture import Capture
from ..core.model_run import ConvCall, IterationTiming, ModelRun, SizeRun
from ..core.model_sweep import ModelSweep
from ..core.walltime import sweep_search_time
from ..core.choices import MODES, sweep_totals
from ..core.consistency import PlanSpread, consistency
from .format import (describe_environment, fmt_ms, grouped_rows, problem_text, search_time_text,
                     short_algo, short_choice, short_tag, table, wrap)

__all__ = ["render_capture", "render_sweep", "render_model_run"]

_SHORT = {"fwd": "fwd", "bwd-data": "bwd-d", "bwd-filter": "bwd-f"}


def _pct(x: float, base: float) -> str:
    return f"{100 * (x / base - 1):+.1f}% vs benchmark" if base else "-"


def _layers(names: List[str], most: int = 2) -> str:
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:most]) + f" +{len(names) - most}"


def render_capture(cap: Capture) -> str:
    """The unique problems of one iteration, their layers and calls per direction."""
    lines = [f"model: {cap.model.describe()}"]
    lines += wrap(f"captured on {cap.device}: {cap.conv_calls} convolution calls per "
                  f"iteration, {len(cap.problems)} unique problems (PyTorch's cache key: "
                  f"sizes, layout, dtype, padding, stride, dilation, groups, TF32 "
                  f"{'on' if cap.tf32 else 'off'}, deterministic "
                  f"{'on' if cap.deterministic else 'off'})")
    if not cap.problems and not cap.uncovered:
        lines.append("the model runs no convolution: nothing for cuDNN's convolutions to do")
        return "\n".join(lines) + "\n"
    rows = [[str(i + 1), problem_text(u.problem),
             *(str(u.calls.get(d, 0) or "-") for d in ("fwd", "bwd-data", "bwd-filter")),
             _layers(u.layers)] for i, u in enumerate(cap.problems)]
    if rows:
        lines.append(table(rows, headers=["#", "problem (input * weight)", "fwd", "bwd-d",
                                          "bwd-f", "layers"]))
    if cap.sizes:
        lines += wrap(f"calls are summed over one iteration at each of the {len(cap.sizes)} "
                      f"input sizes; per size, the unique problems it runs and those no "
                      f"earlier size ran (each costs PyTorch a first call per process):")
        seen = 0
        size_rows = []
        for s in cap.sizes:
            seen += len(s.new)
            size_rows.append([str(s.size), str(s.conv_calls), str(len(s.problems)),
                              str(len(s.new)), str(seen)])
        lines.append(table(size_rows, headers=["size", "conv calls", "unique", "new",
                                               "unique so far"]))
    if any(u.transposed_calls for u in cap.problems):
        lines += wrap("(transposed): a transposed convolution, counted as the convolution "
                      "PyTorch runs it as, the one it is the adjoint of: its forward is that "
                      "problem's bwd-d, its input's gradient that problem's fwd, its "
                      "weight's gradient that problem's bwd-f")
    for u in cap.uncovered:
        lines += wrap(f"not covered: {u.layer}: {u.why}; input "
                      f"{'x'.join(map(str, u.input_shape))}, weight "
                      f"{'x'.join(map(str, u.weight_shape))}, {u.calls} calls per iteration")
    return "\n".join(lines) + "\n"


def _first_calls_ms(exp) -> float:
    """PyTorch's first calls with benchmark on, summed over the directions of a problem."""
    picks = (d.pytorch_pick("benchmark", api=None) for d in exp.directions)
    return sum(p.first_call_ms for p in picks if p is not None and p.first_call_ms is not None)


def _per_iter(ms: Optional[float], calls: int) -> str:
    return "-" if ms is None else fmt_ms(ms * calls)


def render_sweep(sw: ModelSweep) -> str:
    cap = sw.capture
    lines = [render_capture(cap).rstrip("\n")]
    lines += wrap("environment: " + describe_environment(sw.environment))
    totals = sweep_totals(sw)
    cost = {(r.index, r.direction): r for r in totals.rows}
    rows = []
    first_bench = first_heur = 0.0
    first_n = 0
    unlogged = 0  # benchmark picks with no plan search in PyTorch's log
    pick_is_best = False  # some best engine config is PyTorch's pick
    for i, u in enumerate(cap.problems):
        e = sw.entry(i)
        if e is None or e.exploration is None:
            why = "not explored yet (sweep interrupted)" if e is None else e.error
            rows.append([str(i + 1), "", "", why[:60]] + [""] * 5)
            continue
        for d in e.exploration.directions:
            r = cost[(i, d.direction)]
            bench, leg_row, eng = r.pick, r.legacy, r.engine
            no_search = bench is None and sw.pytorch_run is not None and any(
                p.mode == "benchmark" and p.error.startswith("no plan search")
                for p in d.pytorch)
            unlogged += no_search
            same = bool(bench and eng and eng.tag == bench.engine_tag)
            pick_is_best |= same
            heur = d.pytorch_pick("heuristic", api=None)
            if bench and heur and bench.first_call_ms is not None \
                    and heur.first_call_ms is not None:
                first_bench += bench.first_call_ms
                first_heur += heur.first_call_ms
                first_n += 1
            rows.append([str(i + 1) if d is e.exploration.directions[0] else "",
                         _SHORT[d.direction], str(r.calls),
                         short_choice(bench) if bench else ("no search" if no_search
                                                            else "-"),
                         _per_iter(r.pick_ms, r.calls),
                         short_algo(leg_row.algo_name, leg_row.math_type, 24)
                         if leg_row else "-", _per_iter(r.legacy_ms, r.calls),
                         "= PyTorch's" if same else short_tag(eng.tag, 20) if eng else "-",
                         _per_iter(r.engine_ms, r.calls)])
    covered, counted, mode_n = totals.covered, totals.counted, totals.mode_n
    pt_total, best_total = totals.pytorch_ms, totals.best_ms
    lines.append("")
    source = ("PyTorch's pick from its own run of the model in benchmark mode, timed as "
              "the engine config of the same tag" if sw.pytorch_run is not None else
              "PyTorch's pick from a fresh process per problem in benchmark mode")
    scope = ""
    if sw.profile == "quick":  # Note [model legacy rows] in core/options.py
        legacy = ("" if sw.options.get("every_math_type", True)
                  else "; legacy rows: Find under PyTorch's math type")
        scope = f"{legacy}; engine configs: those PyTorch's heuristics and fallbacks list"
    lines += wrap(f"per unique problem and direction: what ran and its steady-state median "
                  f"times the calls one iteration makes (ms per iteration; each problem "
                  f"explored on its own, {source}{scope}; profile {sw.profile}):", "")
    lines.append(table(rows, headers=["#", "dir", "calls", "PyTorch's pick", "ms/iter",
                                      "best legacy", "ms/iter", "best engine", "ms/iter"]))
    if pick_is_best:
        lines.append("= PyTorch's: the best engine config is PyTorch's pick")
    if unlogged:
        lines += wrap(f"no search: {unlogged} problem-direction(s) whose first call in "
                      f"PyTorch's run of the model logged no cuDNN plan search: PyTorch ran "
                      f"them without a cuDNN engine config (ATen runs some convolutions with "
                      f"kernels of its own, e.g. float32 depthwise ones), so its time is not "
                      f"known here")
    lines.append("")
    lines.append(f"== model totals ({covered} of {counted} problem-directions with PyTorch's "
                 f"pick and a time)")
    if covered:
        gain = pt_total - best_total
        lines += wrap(f"convolution time per iteration: {pt_total:.3f} ms under PyTorch's "
                      f"benchmark picks, {best_total:.3f} ms under the best found; "
                      f"{gain:.3f} ms ({100 * gain / pt_total if pt_total else 0:.1f}%) "
                      f"left on the table", "- ")
    if first_n and sw.pytorch_run is None:
        lines += wrap(f"first calls, summed over {first_n} unique problem-directions, each "
                      f"in a fresh process: {first_bench:.0f} ms with benchmark on vs "
                      f"{first_heur:.0f} ms with it off (the model pays these once per "
                      f"process; its own first iteration was not measured here)", "- ")
    if mode_n:
        b, h, det = (totals.by_mode[m] for m in MODES)
        lines += wrap(
            f"convolution time per iteration under each mode's picks ({mode_n} of {counted} "
            f"problem-directions where every mode's pick has a time): benchmark {b:.3f} ms, "
            f"heuristics (benchmark off) {h:.3f} ms ({_pct(h, b)}), deterministic "
            f"{det:.3f} ms ({_pct(det, b)})", "- ")
        worst = totals.deterministic_costs(3)
        if worst:
            lines += wrap("where deterministic mode costs the most (ms per iteration over "
                          "benchmark's pick): " + "; ".join(
                              f"{g:.3f} #{i + 1} {d} ({_layers(cap.problems[i].layers, 2)})"
                              for g, i, d in worst), "- ")
    top = totals.largest_gaps(5)
    if top:
        lines.append("- where PyTorch leaves the most time (ms per iteration):")
        for gap, i, direction in top:
            u = cap.problems[i]
            lines += wrap(f"{gap:.3f} ms: #{i + 1} {direction} ({_layers(u.layers, 4)})",
                          "    ")
    if cap.sizes and first_n:
        explored = {e.index: e.exploration for e in sw.entries if e.exploration is not None}
        costs = [f"{s.size}: {len(s.new)} new, "
                 f"{sum(_first_calls_ms(explored[k]) for k in s.new if k in explored):.0f} ms"
                 for s in cap.sizes]
        lines += wrap("first calls with benchmark on that each new size brings (sum over its "
                      "new problems, each measured in a fresh process): " + "; ".join(costs),
                      "- ")
    missing = sw.missing
    errors = [e for e in sw.entries if e.error]
    if missing or not sw.complete:
        lines += wrap(f"incomplete sweep: {len(missing)} of {len(cap.problems)} unique "
                      f"problems not explored (#{', #'.join(str(i + 1) for i in missing)})"
                      if missing else "incomplete sweep", "- ")
    for e in errors:
        lines += wrap(f"#{e.index + 1} not explored: {e.error}", "- ")
    if sw.wall_s is not None:
        t, stored = sweep_search_time(sw.entries)
        where = search_time_text(t, counts=True)
        if where:
            rest = "" if stored or t.measured_s is None else \
                f"; the rest {max(sw.wall_s - t.measured_s, 0.0):.1f} s"
            also = f" ({stored} problem{'s' if stored > 1 else ''} answered, at least in " \
                f"part, from the results store left out)" if stored else ""
            where = f": {t.directions} directions measured here{also}: {where}{rest}"
        lines += wrap(f"the unique problems' explorations: {sw.wall_s:.1f} s of wall time "
                      f"(the capture and PyTorch's own run of the model not included)"
                      f"{where}", "- ")
    if sw.pytorch_run is not None:
        lines += ["", render_model_run(sw.pytorch_run, cap).rstrip("\n")]
    return "\n".join(lines) + "\n"


def _gib(b: Optional[int]) -> str:
    return "-" if b is None else f"{b / 2**30:.2f}"


def _mem(b: Optional[int]) -> str:
    if b is None:
        return "?"
    return f"{b / 2**30:.2f} GiB" if b >= 2**30 else f"{b / 2**20:.1f} MiB"


def _call_name(c: ConvCall, cap: Capture) -> str:
    """"#3 bwd-f (layer1.0.conv2, layer1.1.conv2 +1)": the problem, direction and layers."""
    if c.problem < 0:
        return f"{_SHORT.get(c.direction, c.direction)} {c.layer or '(not captured)'}"
    u = cap.problems[c.problem]
    where = c.layer or _layers(u.layers)
    return f"#{c.problem + 1} {_SHORT.get(c.direction, c.direction)} ({where})"


def _steady(s: SizeRun) -> List[str]:
    t = s.steady
    if t is None or t.median_ms is None:
        return ["-", "-"]
    return [f"{t.median_ms:.2f}" + (" g" if t.method == "graph" else ""),
            f"{100 * t.spread:.0f}%" if t.spread is not None else "-"]


def _steady_methods(run: ModelRun) -> List[str]:
    """What 'g' in the steady column means, the eager iterations timed beside a graph,
    and why a graph that was asked for was not used."""
    lines, eager, notes = [], [], {}
    graphed = False
    for m in run.modes:
        for s in m.sizes:
            t = s.steady
            if t is None:
                continue
            shape = "x".join(map(str, s.input_shape))
            if t.method == "graph":
                graphed = True
                if t.eager_median_ms is not None:
                    eager.append(f"{m.label} {shape}: {t.eager_median_ms:.2f}")
            if t.note:  # why eager; with a graph, a capture that failed once
                notes.setdefault(t.note, []).append(f"{m.label} {shape}")
    if graphed:
        lines += wrap("g: replays of a CUDA graph of the whole step, between CUDA events: the "
                      "GPU's time per iteration without the host's, timed in a second fresh "
                      "process of the mode that probes nothing (with benchmark on, its own "
                      "search: its plans can differ from those listed); the same step run "
                      "eagerly there (host time included), median ms: " + "; ".join(eager),
                      "- ")
    for note, where in notes.items():
        lines += wrap(f"{', '.join(where)}: {note}", "- ")
    return lines


def _steady_on_off(on: Optional[IterationTiming], off: Optional[IterationTiming]) -> str:
    """The steady iterations with benchmark on vs off, and whether their spread lets the
    two be told apart: a noisy side (IQR / median above NOISY_SPREAD) makes the difference
    one to measure again, not to act on."""
    if on is None or off is None or on.median_ms is None or off.median_ms is None:
        return ""
    text = f"; steady {on.median_ms:.2f} vs {off.median_ms:.2f} ms per iteration"
    noisy = [f"{side} {100 * t.spread:.0f}%" for side, t in (("on", on), ("off", off))
             if t.noisy]
    if noisy:
        text += (f", but noisy (IQR / median {', '.join(noisy)}, above "
                 f"{100 * NOISY_SPREAD:.0f}%): not a difference to act on; 'advise' times "
                 f"the whole step as a CUDA graph until its confidence interval is narrow")
    return text


def _how_many(run: ModelRun) -> str:
    if run.target_ci is None:
        return str(run.iterations)
    return (f"rounds of {run.iterations} until the mean's 95% CI is within "
            f"+-{100 * run.target_ci:g}%")


def render_model_run(run: ModelRun, cap: Capture) -> str:
    """PyTorch's own run of the model: per mode and input size, the first iteration and
    the steady ones; where the first iteration's memory peaked; its costliest first calls."""
    lines = ["== PyTorch's own run of the model (a fresh process per mode)"]
    lines += wrap(f"method: {run.method}. Columns: the first iteration's wall time, its "
                  f"convolutions' first calls (the searches) summed, its peak allocated "
                  f"(tensors and workspaces) and reserved (the caching allocator's pool, "
                  f"what nvidia-smi shows) in GiB; then the steady iterations' median (ms, "
                  f"{_how_many(run)} after {run.warmup} warm-up ones), IQR = "
                  f"(p75-p25)/median, and their peaks", "")
    rows, errors = [], []
    for m in run.modes:
        if m.error:
            errors.append(f"{m.label}: {m.error}"
                          + (" (the sizes above finished)" if m.sizes else ""))
        for k, s in enumerate(m.sizes):
            rows.append([m.label if k == 0 else "", "x".join(map(str, s.input_shape)),
                         f"{s.first_ms:.0f}", f"{s.first_conv_ms:.0f}",
                         _gib(s.first_peak_alloc_bytes), _gib(s.first_peak_reserved_bytes),
                         *_steady(s), _gib(s.steady_peak_alloc_bytes),
                         _gib(s.steady_peak_reserved_bytes)])
    if rows:
        lines.append(table(rows, headers=["mode", "input", "1st ms", "1st conv ms",
                                          "1st alloc", "1st resv", "steady ms", "IQR",
                                          "alloc", "resv"]))
    lines += _steady_methods(run)
    lines += _phase_lines(run)
    for e in errors:
        lines += wrap(e, "- no result: ")
    stored = [f"{m.label} (measured {m.stored})" for m in run.modes if m.stored]
    if stored:
        lines += wrap("from the results store (--refresh runs them again): "
                      + "; ".join(stored), "- ")
    bench, heur = run.mode("benchmark"), run.mode("heuristic")
    if bench is not None and heur is not None and bench.sizes and heur.sizes:
        b, h = bench.sizes[0], heur.sizes[0]
        lines += wrap(
            f"first iteration with benchmark on vs off: {b.first_ms:.0f} vs "
            f"{h.first_ms:.0f} ms; peak allocated {_gib(b.first_peak_alloc_bytes)} vs "
            f"{_gib(h.first_peak_alloc_bytes)} GiB, reserved "
            f"{_gib(b.first_peak_reserved_bytes)} vs {_gib(h.first_peak_reserved_bytes)} GiB"
            + _steady_on_off(b.steady, h.steady), "- ")
    for m in (bench, heur):
        if m is None:
            continue
        s = m.sizes[0]
        c = s.peak_call
        if c is None:
            lines += wrap(f"{m.label}: the first iteration peaked at "
                          f"{_gib(s.first_peak_alloc_bytes)} GiB allocated outside any "
                          f"convolution call", "- ")
            continue
        why = (f"its search built {c.candidates} candidates and timed {c.timed}; the "
               f"largest candidate workspace is {_mem(c.largest_candidate_bytes)}, the "
               f"plan kept needs {_mem(c.plan_workspace_bytes)}" if c.first and
               c.candidates else "not its first call (no search)")
        lines += wrap(f"{m.label}: the first iteration's memory peak, "
                      f"{_gib(c.peak_alloc_bytes)} GiB allocated, was set during "
                      f"{_call_name(c, cap)}: {_gib(c.peak_above_bytes)} GiB above what "
                      f"that call started with; {why}", "- ")
    if bench is not None:
        top = sorted(bench.sizes[0].calls, key=lambda c: c.ms, reverse=True)[:5]
        if top:
            lines.append(f"- costliest first calls with {bench.label} (ms; the plan it "
                         f"kept; candidates timed):")
            for c in top:
                lines += wrap(f"{c.ms:.1f} ms: {_call_name(c, cap)}: "
                              f"{short_tag(c.plan, 40) if c.plan else '?'}; {c.timed} of "
                              f"{c.candidates} timed", "    ")
    lines += _pinned_run_lines(run, cap)
    if bench is not None and len(bench.sizes) > 1:
        costs = [f"{'x'.join(map(str, s.input_shape[1:]))}: {s.first_ms:.0f} ms "
                 f"({len(s.calls)} new calls)" for s in bench.sizes]
        lines += wrap(f"first iteration at each new input size with {bench.label}, in "
                      f"order: " + "; ".join(costs), "- ")
    return "\n".join(lines) + "\n"


def _phase_lines(run: ModelRun) -> List[str]:
    """Where each mode's wall time went (s), the rest being what no phase holds (the
    process's start and its ending, the files between it and the parent)."""
    parts = []
    for m in run.modes:
        if m.wall_s is None or not m.phases_s or m.stored:
            continue
        rest = m.rest_s
        parts.append(f"{m.label} {m.wall_s:.1f} ("
                     + ", ".join(f"{k} {v:.1f}" for k, v in m.phases_s.items())
                     + f", the rest {rest:.1f})")
    return wrap("each mode's wall time (s): " + "; ".join(parts), "- ") if parts else []


def _pinned_run_lines(run: ModelRun, cap: Capture) -> List[str]:
    """The pinned mode's first iteration: how many of its convolution calls ran pinned
    plans, against benchmark off, and its costliest first calls with the plan each ran."""
    pin, heur = run.mode("pinned"), run.mode("heuristic")
    if pin is None or not pin.sizes or pin.sizes[0].pinned is None:
        return []
    s, counts = pin.sizes[0], pin.sizes[0].pinned
    off = (f" vs {heur.sizes[0].first_ms:.0f} ms with benchmark off"
           if heur is not None and heur.sizes else "")
    lines = wrap(f"{pin.label}: {counts.pinned_calls} of {counts.calls} convolution calls of "
                 f"the first iteration ran the plan file's plans, {counts.fallback_calls} "
                 f"PyTorch's own; first iteration {s.first_ms:.0f} ms{off}, peak reserved "
                 f"{_gib(s.first_peak_reserved_bytes)} GiB; its plans built in "
                 f"{sum(d.build_ms for d in counts.directions):.0f} ms", "- ")
    for d in counts.fallbacks[:5]:
        lines += wrap(f"not pinned: {d.description}: {d.reason} ({d.fallback_calls} calls)",
                      "    ")
    top = sorted(s.calls, key=lambda c: c.ms, reverse=True)[:5]
    if top:
        lines.append(f"- costliest first calls with {pin.label} (ms; the plan it ran):")
        for c in top:
            lines += wrap(f"{c.ms:.1f} ms: {_call_name(c, cap)}: "
                          f"{short_tag(c.plan, 40) if c.plan else 'not pinned'}", "    ")
    return lines


def _differ_rows(cap: Capture, p: PlanSpread) -> List[List[str]]:
    """A row per distinct plan: the ranks that chose it and its time on every rank; the
    spread after the first."""
    head = [f"#{p.index + 1}", _SHORT[p.direction], _layers(cap.problems[p.index].layers, 1)]
    spread = f"{100 * p.spread:.1f}%" if p.spread is not None else "-"
    return grouped_rows(
        head, [[short_tag(tag, 44) if tag else "?", ",".join(f"r{r}" for r in rs),
                " / ".join(fmt_ms(t) if t is not None else "-" for t in p.times[tag])]
               for tag, rs in p.ranks.items()], [spread])


def render_consistency(sweeps: List[ModelSweep]) -> str:
    """Identical GPUs side by side (one sweep per rank, every problem on every rank):
    per problem and direction, whether PyTorch's benchmark pick and the best engine config
    agree across ranks, and where they differ, each rank's choice timed on every rank
    (core/consistency.py)."""
    if not sweeps:
        return "no rank's sweep could be read\n"
    cap = sweeps[0].capture
    c = consistency(sweeps)
    lines = wrap(f"== consistency: {c.ranks} ranks ({', '.join(c.gpus)}), every unique "
                 f"problem of {cap.model.describe()} on each", "")
    n = c.compared
    lines += wrap(f"PyTorch's benchmark pick agrees on every rank for {c.same_pick} of {n} "
                  f"problem-directions; the best engine config for {c.same_best} of {n}", "- ")
    ranks = "/".join(f"r{r}" for r in range(len(sweeps)))
    headers = ["#", "dir", "layer", "plan", "chosen on", f"ms on {ranks}", "spread"]
    for differ, what in ((c.picks_differ, "PyTorch's benchmark picks"),
                         (c.bests_differ, "the best engine configs found")):
        rows = [row for p in differ for row in _differ_rows(cap, p)]
        if rows:
            lines += wrap(f"where {what} differ: each plan, the ranks that chose it and its "
                          f"steady-state median on every rank; spread = the slowest of "
                          f"these plans over the fastest on one GPU, the most over the "
                          f"ranks (what the choice alone costs):", "- ")
            lines.append(table(rows, headers=headers))
    return "\n".join(lines) + "\n"
