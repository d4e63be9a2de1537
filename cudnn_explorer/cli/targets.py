"""``--target GPUS`` of the problem command and of ``model``: cuDNN's heuristic rankings for
other GPUs from their device profiles; nothing is measured and no GPU is needed."""
from __future__ import annotations

import os
import sys

from ..core.targets import resolve_targets, shipped_profiles
from .groups import options_from_args, store_choice
from .output import error, notify, write_output

__all__ = ["run_targets", "run_model_targets", "profiles"]


def profiles(text: str):
    """The device profiles --target names (UserError for an unknown one)."""
    return resolve_targets(text)


def profile_files(text) -> list:
    """[(path, what)] for the --target entries that are profile files (read by the
    command: check_output_path refuses writing over them)."""
    if not text:
        return []
    return [(t.strip(), "the --target profile") for t in str(text).split(",")
            if os.path.sep in t.strip() or t.strip().endswith(".json")]


def run_targets(a, problem_from_args) -> int:
    """The problem command's --target: one problem's rankings per target."""
    from ..core.documents import targets_document
    from ..jobs.targets import rank_targets
    from ..report.format import fmt_version, table
    from ..report.targets import render_targets

    if a.target.strip().lower() == "list":
        rows = [[k, e["gpu"], e["compute_capability"],
                 "synthesized" if e.get("synthesized") else "dumped from the device"]
                for k, e in sorted(shipped_profiles().items())]
        print(table(rows, headers=["target", "GPU", "cc", "profile"]))
        return 0
    problem = problem_from_args(a)
    options = options_from_args(a, engines=False)
    r = rank_targets(problem, profiles(a.target), options, store_choice(a), notify)
    if a.json != "-":
        sys.stdout.write(render_targets(problem, r.rankings, fmt_version(r.cudnn) or "?",
                                        r.benchmark_limit, measured=r.measured))
    if a.json is not None:
        write_output(targets_document(problem, r.rankings, r.cudnn, r.benchmark_limit),
                     a.json, "--json")
    if r.all_failed:
        error(f"no target answered: {r.rankings[0].status}")
        return 3
    return 0


def run_model_targets(a, cap, target_profiles) -> int:
    """model --target: every unique problem of ``cap`` ranked for every target."""
    from ..core.documents import model_targets_document
    from ..jobs.targets import rank_capture
    from ..report.format import fmt_version
    from ..report.model import render_capture
    from ..report.targets import plot_target_matrix, render_target_matrix

    r = rank_capture(cap, target_profiles)
    cudnn = fmt_version(r.cudnn) or "?"
    if a.json != "-":  # "--json -": stdout carries the file alone
        sys.stdout.write(render_capture(cap) + "\n"
                         + render_target_matrix(cap, r.rankings, cudnn))
    if a.plot:
        plot_target_matrix(cap, r.rankings, a.plot, f"{cap.model.describe()}: PyTorch's "
                           f"heuristic pick per target (cuDNN {cudnn}, not measured)")
        print(f"wrote {a.plot}", file=sys.stderr)
    if a.json:
        write_output(model_targets_document(cap, r.rankings, r.cudnn), a.json, "--json")
    return 0
