"""``model`` under torchrun: this rank's part of the sweep (jobs/rank.py), and on rank 0
the one report: the merged sweep, or with --consistency where identical GPUs differ."""
from __future__ import annotations

import sys

from .output import error, notify, write_output

__all__ = ["run_rank"]


def run_rank(a, world, spec, options, settings) -> int:
    from ..jobs.rank import rank_sweep
    from ..report.model import render_consistency, render_sweep

    def say(msg):
        if not a.quiet:
            print(f"[rank {world.rank}] {msg}", file=sys.stderr, flush=True)

    out = rank_sweep(spec, world, options, settings, consistency=a.consistency,
                     json_path=a.json, progress=say, notify=notify)
    if out.rank != 0:
        return 0 if out.ok else 3
    if a.consistency:
        sys.stdout.write(render_consistency(out.sweeps))
        return 0 if out.ok else 3
    sw = out.sweep
    sys.stdout.write(render_sweep(sw))
    if a.json:
        write_output(sw.to_json() + "\n", a.json, "--json")
    if sw.missing:
        error(f"{len(sw.missing)} of {len(sw.capture.problems)} unique problems were not "
              f"measured (#{', #'.join(str(i + 1) for i in sw.missing)})"
              f"{': ' + out.barrier if out.barrier else ''}; run the same command again "
              f"(--resume) to measure only those")
        return 3
    return 0
