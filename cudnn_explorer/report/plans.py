"""A plan file in text: its environment and filters, one row per plan. Pure."""
from __future__ import annotations

from ..core.plans import PlanFile
from ..core.records import MIB
from .format import fmt_ms, fmt_version, problem_text, short_tag, table, wrap

__all__ = ["render_plans"]

_SHORT = {"fwd": "fwd", "bwd-data": "bwd-d", "bwd-filter": "bwd-f"}


def render_plans(p: PlanFile) -> str:
    env = p.environment
    lines = wrap(f"plans of {p.source or '?'}: {len(p.entries)} problem-directions, policy "
                 f"{p.policy}"
                 + (f", workspace at most {p.max_workspace_bytes / MIB:.2f} MiB"
                    if p.max_workspace_bytes is not None else "")
                 + (", deterministic only" if p.deterministic_only else ""), "")
    lines += wrap(f"measured on {env.gpu_name or '?'} (compute capability "
                  f"{env.compute_capability or '?'}), cuDNN {fmt_version(env.cudnn) or '?'}, "
                  f"cudnn-frontend {env.cudnn_frontend or '?'}, torch {env.torch or '?'}"
                  + (f"; written {p.created}" if p.created else ""), "")
    rows = [[str(i + 1), _SHORT.get(e.key.direction, e.key.direction),
             problem_text(e.problem), ", ".join(e.layers[:1]) or "-",
             short_tag(e.tag, 30), f"{e.workspace_bytes / MIB:.2f}",
             fmt_ms(e.median_ms) if e.median_ms is not None else "-"]
            for i, e in enumerate(p.entries)]
    lines.append(table(rows, headers=["#", "dir", "problem (input * weight)", "layer",
                                      "engine config",
                                      "ws MiB", "median ms"]))
    for i, e in enumerate(p.entries):
        lines += wrap(f"#{i + 1}: {e.why}", "  ")
    for s in p.skipped:
        lines += wrap(f"no plan: {s}", "- ")
    return "\n".join(lines) + "\n"
