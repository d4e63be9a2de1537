"""What PyTorch's first calls cost, and how much of it depends on what ran before.

The problem command runs PyTorch in every mode, each in a fresh process, one after another
(benchmark first), and reports each mode's first call per direction; its verdict "cost N ms
once" is benchmark's first call less the heuristics mode's. Those processes share the CUDA
driver's JIT cache (CUDA_CACHE_PATH), which keeps run-time compiled kernels between
processes, so a later mode can reuse what an earlier one compiled (docs/limits.md, "First
calls depend on what ran before"). This runs the same children (measure/pytorch_picks.py's
run_child) under four conditions, each with JIT caches that start empty:

* in order:  the modes in the command's order, sharing one cache (the command on a machine
  that never compiled these kernels);
* again:     the same order and the same cache once more (the command's second run);
* reversed:  the modes in reverse order, sharing a new cache;
* private:   every mode its own new cache (no mode reuses another's kernels).

The kernel's page cache (cuDNN's libraries) is shared by all of them and not controlled
(--drop-page-cache drops it before every condition, as root). Per mode and direction it
prints the median first call (ms) of --repeats rounds under each condition, and the verdict's
difference, benchmark less heuristics, under each.

Usage: python scripts/bench_first_calls.py [--shape 32,3,224,224 --kernel 3 ...]
       [--repeats N] [--drop-page-cache] [--json PATH]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from typing import Callable, Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_search import jit_cache  # noqa: E402  (after the path)
from cudnn_explorer.core.errors import ChildError  # noqa: E402
from cudnn_explorer.measure.pytorch_picks import (CHILD_MODULE, default_modes,  # noqa: E402
                                                  run_child)

CONDITIONS = ("in order", "again", "reversed", "private")


def drop_page_cache() -> None:
    """Write back and drop the kernel's page cache (root only; OSError otherwise)."""
    subprocess.run(["sync"], check=False)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def one_round(problem, options, drop: bool = False,
              child_module: str = CHILD_MODULE) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{condition: {mode label: {direction: first call ms}}} for one round of CONDITIONS
    (a mode whose child failed is left out of its condition, and said on stderr);
    ``child_module``: the child run_child starts (measure/pytorch_picks.py's)."""
    modes = default_modes(options.benchmark_limit)
    out: Dict[str, Dict[str, Dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="first_calls_") as root:
        def run(condition: str, order, folder_of: Callable[[int], str]) -> None:
            if drop:
                drop_page_cache()
            got = out.setdefault(condition, {})
            for i, spec in enumerate(order):
                folder = folder_of(i)
                os.makedirs(folder, exist_ok=True)
                with jit_cache(folder):
                    try:
                        res = run_child(problem, spec, options, child_module=child_module)
                    except ChildError as e:
                        print(f"bench_first_calls: {condition}, {spec.label}: {e}",
                              file=sys.stderr)
                        continue
                got[spec.label] = {d.direction: d.first_call_ms for d in res.directions}

        shared = os.path.join(root, "shared")
        run("in order", modes, lambda i: shared)
        run("again", modes, lambda i: shared)
        backward = os.path.join(root, "reversed")
        run("reversed", list(reversed(modes)), lambda i: backward)
        run("private", modes, lambda i: os.path.join(root, f"private{i}"))
    return out


def medians(rounds: List[dict]) -> Dict[str, Dict[str, Dict[str, float]]]:
    """{condition: {mode: {direction: median first call ms over the rounds that have it}}}."""
    values: Dict[str, Dict[str, Dict[str, List[float]]]] = {}
    for r in rounds:
        for cond, modes in r.items():
            for mode, dirs in modes.items():
                for d, ms in dirs.items():
                    values.setdefault(cond, {}).setdefault(mode, {}).setdefault(d, []).append(ms)
    return {c: {m: {d: statistics.median(v) for d, v in ds.items()} for m, ds in ms.items()}
            for c, ms in values.items()}


def table(med: Dict[str, Dict[str, Dict[str, float]]], modes: List[str],
          directions: List[str], bench: str, heur: str) -> str:
    """The first calls (ms) per mode and direction, a column per condition, then the
    verdict's difference (benchmark less heuristics) per direction."""
    from tabulate import tabulate

    def cell(cond, mode, d):
        v = med.get(cond, {}).get(mode, {}).get(d)
        return "-" if v is None else f"{v:.1f}"

    rows = [[mode, d] + [cell(c, mode, d) for c in CONDITIONS]
            for mode in modes for d in directions]
    for d in directions:
        diff = []
        for c in CONDITIONS:
            b = med.get(c, {}).get(bench, {}).get(d)
            h = med.get(c, {}).get(heur, {}).get(d)
            diff.append("-" if b is None or h is None else f"{b - h:.1f}")
        rows.append([f"{bench} less {heur}", d] + diff)
    return tabulate(rows, headers=["mode", "direction"] + [f"{c} (ms)" for c in CONDITIONS],
                    disable_numparse=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="32,3,224,224")
    ap.add_argument("--out-channels", type=int, default=None)
    ap.add_argument("--kernel", default="3")
    ap.add_argument("--stride", default="1")
    ap.add_argument("--padding", default=None)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--layout", default="nchw")
    ap.add_argument("--repeats", type=int, default=1,
                    help="rounds (each runs every mode under every condition: 20 fresh "
                         "processes, each importing torch)")
    ap.add_argument("--drop-page-cache", action="store_true",
                    help="drop the kernel's page cache before every condition (root)")
    ap.add_argument("--json", default=None)
    a = ap.parse_args(argv)

    import cudnn_explorer as ce
    from cudnn_explorer.core.options import ExploreOptions
    from cudnn_explorer.measure import native

    kw = dict(kernel=a.kernel, stride=a.stride, dtype=a.dtype, layout=a.layout)
    if a.out_channels is not None:
        kw["out_channels"] = a.out_channels
    if a.padding is not None:
        kw["padding"] = a.padding
    try:
        problem = ce.ConvProblem.create(a.shape, **kw)
        if a.repeats < 1:
            raise ce.UserError(f"--repeats {a.repeats}: valid: 1 or more")
    except ce.UserError as e:
        print(f"bench_first_calls: {e}", file=sys.stderr)
        return 2
    options = ExploreOptions.create()
    try:
        native.require_gpu(options.device)
        if a.drop_page_cache:
            drop_page_cache()
    except (ce.ExplorerError, OSError) as e:
        print(f"bench_first_calls: {e}", file=sys.stderr)
        return 3
    rounds = []
    for k in range(a.repeats):
        print(f"round {k + 1} of {a.repeats}: {len(CONDITIONS)} conditions x "
              f"{len(default_modes(options.benchmark_limit))} modes", file=sys.stderr,
              flush=True)
        rounds.append(one_round(problem, options, drop=a.drop_page_cache))
    modes = [m.label for m in default_modes(options.benchmark_limit)]
    med = medians(rounds)
    print(f"{problem.describe()}: PyTorch's first call per mode and direction, median of "
          f"{a.repeats} round(s), ms (each condition's JIT caches start empty; page cache "
          f"{'dropped before each condition' if a.drop_page_cache else 'not controlled'})")
    print(table(med, modes, list(options.directions), modes[0],
                "heuristics (benchmark off)"))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"problem": problem.to_dict(), "conditions": list(CONDITIONS),
                       "rounds": rounds, "medians": med}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
