"""Text of cuDNN's heuristic rankings for target GPUs (no measurement: every row is a
heuristic ranking, and the header says so)."""
from __future__ import annotations

from typing import Dict, List, Optional

from ..core.problem import ConvProblem
from ..core.targets import DEFAULT_BENCHMARK_LIMIT, TargetRanking
from .format import DIRECTION_TITLES, ELIDED, distinct_tags, table, wrap

__all__ = ["render_targets", "render_target_matrix", "plot_target_matrix", "target_matrix"]


def _cut(name: Optional[str], width: int = 24) -> str:
    if not name:
        return "-"
    return name if len(name) <= width else name[:width - 1] + "~"


def render_targets(problem: ConvProblem, rankings: List[TargetRanking], cudnn: str,
                   benchmark_limit: Optional[int] = None, deterministic: bool = False,
                   measured: Optional[Dict[str, Dict[str, float]]] = None) -> str:
    """Per direction, one row per target: cuDNN's top candidate (heuristic mode A), what
    PyTorch would run with benchmark off, how many plans benchmark mode would time, and
    which targets agree. ``measured``: per GPU name, engine config (its name without the
    operation, e.g. "eng70_k2=4_k18=0") -> steady-state median ms measured on such a GPU,
    shown beside a target's pick where it was measured."""
    limit = DEFAULT_BENCHMARK_LIMIT if benchmark_limit is None else benchmark_limit
    lines = wrap(f"problem: {problem.describe()}")
    lines += wrap(f"HEURISTIC, NOT MEASURED: cuDNN {cudnn}'s deviceless heuristics for each "
                  f"target's device profile (modes A and FALLBACK, in PyTorch's order, "
                  f"filtered by PyTorch's rules); synthesized profiles are marked *")
    seen = {}
    for r in rankings:
        seen.setdefault(r.target, f"{r.target}{'*' if r.synthesized else ''} = {r.device_name}")
    lines += wrap("targets: " + "; ".join(seen.values()))
    if measured:
        lines += wrap(f"MEASURED beside a pick: the steady-state median of the same engine "
                      f"config on that GPU, from the results store "
                      f"({', '.join(sorted(measured))})")
    elided = False
    for direction in dict.fromkeys(r.direction for r in rankings):
        rows = []
        picks = {}
        ours = [x for x in rankings if x.direction == direction and x.ok]
        shown = distinct_tags([t for x in ours for t in (
            x.a[0].name if x.a else None,
            _name(x.heuristic_pick(problem.dtype, problem.tf32, deterministic)))], 24)
        elided |= any("~" in v.rstrip("~") for v in shown.values())
        for r in (x for x in rankings if x.direction == direction):
            name = r.target + ("*" if r.synthesized else "")
            if not r.ok:
                rows.append([name, r.compute_capability, str(r.sm_count), r.status[:60], "",
                             "", ""])
                continue
            top = r.a[0].name if r.a else None
            pick = r.heuristic_pick(problem.dtype, problem.tf32, deterministic)
            bench = r.benchmark_candidates(problem.dtype, problem.tf32, limit)
            picks[r.target] = pick.name if pick else None
            ms = (measured or {}).get(r.device_name, {}).get(pick.name) if pick else None
            rows.append([name, r.compute_capability, str(r.sm_count), shown.get(top, "-"),
                         shown.get(_name(pick), "-")
                         + (f" ({ms:.4f} ms)" if ms is not None else ""),
                         f"{len(bench)} of {len(r.candidates())}", ""])
        for row in rows:
            key = row[0].rstrip("*")
            same = [t for t, p in picks.items() if t != key and p and p == picks.get(key)]
            row[-1] = _cut(",".join(same), 22) if same else ("-" if key in picks else "")
        lines.append(f"== {DIRECTION_TITLES.get(direction, direction)} ({direction})")
        lines.append(table(rows, headers=["target", "cc", "SMs", "cuDNN's top (A)",
                                          "PyTorch heuristic pick", "bench times",
                                          "same pick as"]))
        distinct = {p for p in picks.values() if p}
        if len(picks) > 1:
            lines += wrap(f"   {len(distinct)} different heuristic picks across {len(picks)} "
                          f"targets" if len(distinct) > 1 else
                          "   every target gets the same heuristic pick")
    if elided:
        lines += wrap(ELIDED)
    return "\n".join(lines) + "\n"


def _name(plan) -> Optional[str]:
    return plan.name if plan is not None else None


def _engine(plan) -> str:
    return plan.name.split("_")[0] if plan is not None else "-"


def target_matrix(cap, rankings, deterministic: bool = False):
    """Rows (label, {target: heuristic pick or None}) for every unique problem and direction
    of a capture; ``rankings[i]``: the TargetRankings of problem i."""
    rows = []
    for i, (u, ranks) in enumerate(zip(cap.problems, rankings)):
        for d in u.directions:
            picks = {}
            for r in ranks:
                if r.direction == d:
                    picks[r.target] = (r.heuristic_pick(u.problem.dtype, u.problem.tf32,
                                                        deterministic) if r.ok else None)
            rows.append((f"#{i + 1} {d}", picks))
    return rows


def render_target_matrix(cap, rankings, cudnn: str) -> str:
    """Problems x targets, each cell the engine of PyTorch's heuristic pick there; then
    where the targets agree (same engine) and how often each pair does."""
    rows = target_matrix(cap, rankings)
    targets = list(dict.fromkeys(r.target for ranks in rankings for r in ranks))
    synth = {r.target for ranks in rankings for r in ranks if r.synthesized}
    lines = wrap(f"HEURISTIC, NOT MEASURED: PyTorch's heuristic pick (benchmark off) on each "
                 f"target, from cuDNN {cudnn}'s deviceless heuristics; engine ids per unique "
                 f"problem and direction (--json has the full configs); * = synthesized "
                 f"profile")
    body = []
    for label, picks in rows:
        body.append([label] + [_engine(picks.get(t)) for t in targets]
                    + ["yes" if len({_engine(p) for p in picks.values()}) == 1 else ""])
    lines.append(table(body, headers=["problem"] + [t + ("*" if t in synth else "")
                                                    for t in targets] + ["all agree"]))
    agree = sum(1 for b in body if b[-1])
    lines += wrap(f"all {len(targets)} targets pick the same engine for {agree} of "
                  f"{len(body)} problem-directions")
    pairs = []
    for a_i, a in enumerate(targets):
        for b in targets[a_i + 1:]:
            same = sum(1 for _, p in rows if _engine(p.get(a)) == _engine(p.get(b)))
            pairs.append(f"{a}/{b} {100 * same / max(1, len(rows)):.0f}%")
    if pairs:
        lines += wrap("same engine, by pair: " + ", ".join(pairs))
    return "\n".join(lines) + "\n"


def plot_target_matrix(cap, rankings, path: str, title: str) -> None:
    """A heatmap of the matrix: one colour per engine, the engine id in each cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = target_matrix(cap, rankings)
    targets = list(dict.fromkeys(r.target for ranks in rankings for r in ranks))
    engines = sorted({_engine(p.get(t)) for _, p in rows for t in targets})
    index = {e: i for i, e in enumerate(engines)}
    grid = [[index[_engine(p.get(t))] for t in targets] for _, p in rows]
    fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(targets), 1.0 + 0.28 * len(rows)))
    # one colour per engine (tab20 repeats after 20 engines; the labels stay exact)
    ax.imshow([[i % 20 for i in row] for row in grid], cmap="tab20", aspect="auto", vmin=0,
              vmax=19)
    for y, (_, p) in enumerate(rows):
        for x, t in enumerate(targets):
            ax.text(x, y, _engine(p.get(t)), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(targets)), targets)
    ax.set_yticks(range(len(rows)), [label for label, _ in rows], fontsize=7)
    import textwrap

    ax.set_title("\n".join(textwrap.wrap(title, 60)), fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
