"""A benchmark's JSON result as the Markdown table docs/benchmarks.md shows.

``python -m benchmarks.render RESULT.json [--stamp]`` prints the table (with ``--stamp``,
first the line that says where it was measured). No GPU and no torch needed: the table
comes from the file alone, one row per row and figure, one column per mode (the median,
its spread, ``(noisy)`` above 10%), the best mode in bold, then each mode over the
baseline mode (a ratio of medians, with the least and greatest of its repeats' own where
known).
"""
import argparse
import json
import re
import sys
from typing import Optional

from .harness import NOISY


def number(v: float) -> str:
    """A median as the tables show it: thousands grouped from 1,000, one decimal from 10,
    two from 1, three significant digits below."""
    a = abs(v)
    if a >= 1000:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.3g}"


def cell_text(cell: Optional[dict], best: bool) -> str:
    if cell is None:
        return ""
    text = number(cell["median"])
    if best:
        text = f"**{text}**"
    s = cell.get("spread")
    if s is not None:
        text += f" ±{s * 100:.0f}%"
        if s > NOISY:
            text += " (noisy)"
    return text


def best_mode(found: dict, better: str) -> Optional[str]:
    """The mode with the lowest (or highest) median, where there are two modes or more."""
    if len(found) < 2 or better not in ("lower", "higher"):
        return None
    pick = min if better == "lower" else max
    return pick(found, key=lambda m: found[m]["median"])


def ratio_text(r: dict) -> str:
    """A ratio of medians, with its repeats' own least and greatest where known:
    "0.981 (0.95–1.12)"."""
    text = f"{r['ratio']:.3f}"
    if r.get("paired"):
        lo, hi = r["paired"]
        text += f" ({lo:.2f}–{hi:.2f})"
    return text


def render(doc: dict) -> str:
    """The table of one result document, as Markdown text (no trailing newline)."""
    modes, rows, base = doc["modes"], doc["rows"], doc.get("baseline")
    others = [m for m in modes if base is not None and m != base]
    by = {(c["row"], c["mode"], c["figure"]): c for c in doc["cells"]}
    ratio = {(r["row"], r["mode"], r["figure"]): ratio_text(r) for r in doc["ratios"]}
    head = (["case"] if len(rows) > 1 else []) + ["figure"] + modes + \
        [f"{m} / {base}" for m in others]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        for fig in doc["figures"]:
            found = {m: by[(row, m, fig["key"])] for m in modes if (row, m, fig["key"]) in by}
            if not found:
                continue
            best = best_mode(found, fig.get("better", "lower"))
            label = f"{fig['label']} ({fig['unit']})" if fig["unit"] else fig["label"]
            parts = ([row] if len(rows) > 1 else []) + [label]
            parts += [cell_text(found.get(m), m == best) for m in modes]
            parts += [ratio.get((row, m, fig["key"]), "") for m in others]
            lines.append("| " + " | ".join(parts) + " |")
    return "\n".join(lines)


def stamp(doc: dict) -> str:
    """Where and how the numbers were measured, in one line."""
    e = doc["environment"]
    gpu = e.get("gpu") or "no GPU"
    if e.get("gpus", 1) > 1:
        gpu = f"{e['gpus']}x {gpu}"
    parts = [gpu, f"driver {e.get('driver') or '?'}", f"torch {e.get('torch') or '?'}",
             f"cuDNN {e.get('cudnn') or '?'}", f"cudnn-frontend {e.get('cudnn_frontend') or '?'}",
             f"cudnn_explorer {e.get('package') or 'version not recorded'}"]
    runs = doc.get("repeats", 0)
    parts.append(f"{runs} run{'s' if runs != 1 else ''} per cell")
    if doc.get("complete") is False:  # interrupted: the notes say how many runs finished
        parts.append(next((n for n in doc.get("notes", []) if n.startswith("interrupted")),
                          "interrupted"))
    # where the run wrote its result is no condition of it: --json PATH is left out
    command = re.sub(r" --json(=| )\S+", "", e.get("command", ""))
    return "; ".join(parts) + f"; `{command}`"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description="a benchmark's JSON result as a Markdown table")
    ap.add_argument("result", help="the JSON a benchmark wrote")
    ap.add_argument("--stamp", action="store_true",
                    help="first the line that says where it was measured")
    a = ap.parse_args(argv)
    with open(a.result) as f:
        doc = json.load(f)
    if doc.get("schema") != "cudnn_explorer.benchmark":
        print(f"{a.result}: not a benchmark result (schema {doc.get('schema')!r})",
              file=sys.stderr)
        return 2
    if a.stamp:
        print(stamp(doc) + "\n")
    print(render(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
