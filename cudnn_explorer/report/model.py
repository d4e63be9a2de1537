"""Text reports of a model: its captured convolutions, and a sweep's per-iteration view.

Per unique problem and direction: PyTorch's benchmark pick, the best legacy algorithm and
the best engine config, each in ms per call (steady-state median) and in ms per iteration
(times the calls one iteration makes). Model totals and the layers where PyTorch leaves
the most time follow. Pure Python: renders a saved sweep without a GPU.
"""
from __future__ import annotations

from typing import List, Optional

from ..core.capture import Capture
from ..core.sweep import ModelSweep
from .engines import chosen
from .format import describe_environment, fmt_ms, short_algo, short_choice, short_tag, table, wrap

__all__ = ["render_capture", "render_sweep"]

_SHORT = {"fwd": "fwd", "bwd-data": "bwd-d", "bwd-filter": "bwd-f"}


def _layers(names: List[str], most: int = 2) -> str:
    if len(names) <= most:
        return ", ".join(names)
    return ", ".join(names[:most]) + f" +{len(names) - most}"


def _problem_text(p) -> str:
    """A compact problem: input, weight, stride, groups, dtype, layout."""
    x = "x".join(map(str, p.input_shape))
    w = "x".join(map(str, p.weight_shape))
    extra = "" if set(p.stride) == {1} else f" s{'x'.join(map(str, p.stride))}"
    extra += "" if p.groups == 1 else f" g{p.groups}"
    return f"{x} * {w}{extra} {p.dtype} {p.layout}"


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
    rows = [[str(i + 1), _problem_text(u.problem),
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
    for u in cap.uncovered:
        lines += wrap(f"not covered: {u.layer}: {u.why}; input "
                      f"{'x'.join(map(str, u.input_shape))}, weight "
                      f"{'x'.join(map(str, u.weight_shape))}, {u.calls} calls per iteration")
    return "\n".join(lines) + "\n"


def _time(x) -> Optional[float]:
    return x.time if x is not None else None


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
    rows, gaps = [], []
    pt_total = best_total = 0.0
    covered = counted = 0
    first_bench = first_heur = 0.0
    first_n = 0
    for i, u in enumerate(cap.problems):
        e = sw.entry(i)
        if e is None or e.exploration is None:
            why = "not explored yet (sweep interrupted)" if e is None else e.error
            rows.append([str(i + 1), "", "", why[:60]] + [""] * 5)
            continue
        for d in e.exploration.directions:
            calls = u.calls.get(d.direction, 0)
            bench, leg_row, eng = chosen(d)
            pick, legacy, engine = _time(bench), _time(leg_row), _time(eng)
            found = [t for t in (pick, legacy, engine) if t is not None]
            best = min(found) if found else None
            counted += 1
            gap = None
            if pick is not None and best is not None:
                covered += 1
                pt_total += pick * calls
                best_total += best * calls
                gap = (pick - best) * calls
                gaps.append((gap, i, d.direction))
            heur = d.pytorch_pick("heuristic", api=None)
            if bench and heur and bench.first_call_ms is not None \
                    and heur.first_call_ms is not None:
                first_bench += bench.first_call_ms
                first_heur += heur.first_call_ms
                first_n += 1
            rows.append([str(i + 1) if d is e.exploration.directions[0] else "",
                         _SHORT[d.direction], str(calls),
                         short_choice(bench) if bench else "-", _per_iter(pick, calls),
                         short_algo(leg_row.algo_name, leg_row.math_type, 24)
                         if leg_row else "-", _per_iter(legacy, calls),
                         short_tag(eng.tag, 20) if eng else "-", _per_iter(engine, calls)])
    lines.append("")
    lines += wrap("per unique problem and direction: what ran and its steady-state median "
                  "times the calls one iteration makes (ms per iteration; each problem "
                  "explored on its own, PyTorch's pick from a fresh process in benchmark "
                  "mode):", "")
    lines.append(table(rows, headers=["#", "dir", "calls", "PyTorch's pick", "ms/iter",
                                      "best legacy", "ms/iter", "best engine", "ms/iter"]))
    lines.append("")
    lines.append(f"== model totals ({covered} of {counted} problem-directions with PyTorch's "
                 f"pick and a time)")
    if covered:
        gain = pt_total - best_total
        lines += wrap(f"convolution time per iteration: {pt_total:.3f} ms under PyTorch's "
                      f"benchmark picks, {best_total:.3f} ms under the best found; "
                      f"{gain:.3f} ms ({100 * gain / pt_total if pt_total else 0:.1f}%) "
                      f"left on the table", "- ")
    if first_n:
        lines += wrap(f"first calls, summed over {first_n} unique problem-directions, each "
                      f"in a fresh process: {first_bench:.0f} ms with benchmark on vs "
                      f"{first_heur:.0f} ms with it off (the model pays these once per "
                      f"process; its own first iteration was not measured here)", "- ")
    top = sorted((g for g in gaps if g[0] > 0), reverse=True)[:5]
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
        lines.append(f"- sweep wall time: {sw.wall_s:.0f} s")
    return "\n".join(lines) + "\n"
