"""A plan file in text: its environment and filters, one row per plan. Pure."""
from __future__ import annotations

from ..core.plans import PlanFile
from ..core.records import MIB
from .format import fmt_ms, fmt_version, problem_text, short_tag, table, wrap

__all__ = ["render_plans"]

_SHORT = {"fwd": "fwd", "bwd-data": "bwd-d", "bwd-filter": "bwd-f"}


_RULES = {"best": "each plan is the fastest re-timed engine config PyTorch's rules allow",
          "pytorch": "each plan is benchmark mode's own pick, frozen"}


def render_plans(p: PlanFile) -> str:
    """The plan file in text within WIDTH columns: what it was made of and where, one row
    per plan (its problem, first layer, engine config, workspace, median and its time
    against PyTorch's benchmark pick), then the problem-directions without a plan. Each
    plan's ``why`` in full is in the file."""
    env = p.environment
    kinds = {(e.problem.dtype, e.problem.layout) for e in p.entries}
    shared = next(iter(kinds)) if len(kinds) == 1 else None
    rule = _RULES.get(p.policy, p.policy)
    if p.policy == "pytorch" and p.deterministic_only:
        rule = "each plan is deterministic mode's own pick, frozen"
    lines = wrap(f"plans of {p.source or '?'}: {len(p.entries)} problem-directions, policy "
                 f"{p.policy} ({rule})"
                 + (f", workspace at most {p.max_workspace_bytes / MIB:.2f} MiB"
                    if p.max_workspace_bytes is not None else "")
                 + (", deterministic only" if p.deterministic_only else ""), "")
    lines += wrap(f"measured on {env.gpu_name or '?'} (compute capability "
                  f"{env.compute_capability or '?'}), cuDNN {fmt_version(env.cudnn) or '?'}, "
                  f"cudnn-frontend {env.cudnn_frontend or '?'}, torch {env.torch or '?'}"
                  + (f"; written {p.created}" if p.created else ""), "")
    gain = p.predicted_gain_ms
    lines += wrap("ms: the plan's steady median per call; vs pick: against PyTorch's "
                  "benchmark pick, both re-timed in the sweep"
                  + (f"; {gain:.3f} ms per iteration saved in all" if gain is not None
                     else "")
                  + (f"; every problem {shared[0]} {shared[1]}" if shared else ""), "")
    rows = [[_SHORT.get(e.key.direction, e.key.direction),
             problem_text(e.problem, kind=shared is None), _clip(e.layers[0], 18)
             if e.layers else "-", short_tag(e.tag, 30), f"{e.workspace_bytes / MIB:.2f}",
             fmt_ms(e.median_ms) if e.median_ms is not None else "-", _versus(e)]
            for e in p.entries]
    lines.append(table(rows, headers=["dir", "problem (input * weight)", "layer",
                                      "engine config", "ws MiB", "ms", "vs pick"]))
    for s in p.skipped:
        lines += wrap(f"no plan: {s}", "- ")
    return "\n".join(lines) + "\n"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 1] + "~"


def _versus(e) -> str:
    """The plan's median against PyTorch's benchmark pick's, in percent ("same" within
    0.5%); "-" where the sweep timed no pick."""
    if e.pytorch_ms is None or e.median_ms is None or e.pytorch_ms <= 0:
        return "-"
    pct = (e.median_ms - e.pytorch_ms) / e.pytorch_ms * 100
    return "same" if abs(pct) < 0.5 else f"{pct:+.0f}%"
