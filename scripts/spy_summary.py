"""Where a py-spy recording's time went: the `model-spy` and `search-spy` parts of
scripts/gpu_check.sh write py-spy's raw format (one line per stack, its frames joined by
";", then a space and its sample count; with --subprocesses each stack starts with its
processes as "process PID:\"command\"").

Prints each process's seconds (samples / rate; --idle recordings count waiting too), then,
for the processes whose command holds --process (default: all), the tree of this
project's frames (cudnn_explorer/ and scripts/), each with its seconds, down to --depth
frames and above --min seconds; the last frame of each stack is shown under its caller
as "~name".

Usage: python scripts/spy_summary.py RAW [--rate 100] [--process TEXT] [--depth 8]
           [--min 0.5]
"""
import argparse
import collections
import re
import sys
from typing import Dict, Iterable, List, Tuple

OURS = re.compile(r"\((?:[^()]*/)?((?:cudnn_explorer|scripts)/[^()]*)\)")


def parse(lines: Iterable[str]) -> List[Tuple[str, List[str], int]]:
    """(process, frames, samples) of each line of a raw recording; lines that do not
    read are skipped."""
    out = []
    for line in lines:
        stack, _, n = line.rstrip("\n").rpartition(" ")
        if not stack or not n.isdigit():
            continue
        frames = stack.split(";")
        procs = [f for f in frames if f.startswith("process ")]
        out.append((procs[-1] if procs else "", [f for f in frames if not f.startswith(
            "process ")], int(n)))
    return out


def per_process(stacks) -> Dict[str, int]:
    """Samples per process, most first."""
    c = collections.Counter()
    for proc, _, n in stacks:
        c[proc] += n
    return dict(c.most_common())


def tree(stacks, depth: int) -> Dict[Tuple[str, ...], int]:
    """Samples per path of this project's frames (at most ``depth``), each path ending in
    its stack's last frame as "~frame"."""
    t: Dict[Tuple[str, ...], int] = collections.Counter()
    for _, frames, n in stacks:
        ours = [OURS.sub(r"(\1)", f) for f in frames if OURS.search(f)]
        path = tuple(ours[:depth]) + ("~" + (frames[-1] if frames else "(no frame)")[:70],)
        for i in range(1, len(path) + 1):
            t[path[:i]] += n
    return t


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("raw")
    ap.add_argument("--rate", type=float, default=100.0, help="samples a second (py-spy -r)")
    ap.add_argument("--process", default="", help="only processes whose command holds this")
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--min", type=float, default=0.5, help="seconds below which a node is left out")
    a = ap.parse_args(argv)
    if a.rate <= 0 or a.depth < 1:
        print(f"--rate {a.rate:g} and --depth {a.depth}: valid: a rate above 0 and a depth "
              f"of at least 1", file=sys.stderr)
        return 2
    try:
        with open(a.raw) as f:
            stacks = parse(f)
    except OSError as e:
        print(f"{a.raw}: {e.strerror}", file=sys.stderr)
        return 2
    for proc, n in per_process(stacks).items():
        print(f"{n / a.rate:9.2f} s  {proc[:110]}")
    chosen = [s for s in stacks if a.process in s[0]]
    t = tree(chosen, a.depth)
    print()
    for path in sorted(t):
        if t[path] / a.rate >= a.min:
            print(f"{t[path] / a.rate:9.2f} s  " + "  " * (len(path) - 1) + path[-1][:110])
    return 0


if __name__ == "__main__":
    sys.exit(main())
