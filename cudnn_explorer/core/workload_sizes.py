"""A workload's input sizes and how often each occurs: a shape-distribution file
(``advise --shape-dist``) and the Python API's (size, count) pairs, checked alike. Pure
Python."""
from __future__ import annotations

import math
import numbers
import re
from typing import List, Tuple

from .errors import UserError
from .schema import shown

__all__ = ["parse_shape_dist", "check_sizes"]

MAX_SIDE, MAX_SIZES = 65536, 256  # an input side's largest value; the most sizes


def parse_shape_dist(text: str, name: str) -> List[Tuple[int, float]]:
    """A shape-distribution file: one "SIZE COUNT" per line (a square input side and how
    often it occurs, any positive number; spaces, a comma or a colon between them), "#"
    comments and blank lines ignored. UserError names the file, the line and what is
    wrong."""
    out: List[Tuple[int, float]] = []
    seen = set()
    for n, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue

        def bad(why: str) -> UserError:
            return UserError(f"--shape-dist '{name}': line {n} {shown(raw.strip())}: {why}")

        parts = [p for p in re.split(r"[\s,:]+", line) if p]
        if len(parts) != 2:
            raise bad("expected SIZE COUNT, e.g. 320 12")
        if not re.fullmatch(r"[0-9]{1,6}", parts[0]) or not 1 <= int(parts[0]) <= MAX_SIDE:
            raise bad(f"size {parts[0]!r}: valid: an integer from 1 to {MAX_SIDE}")
        try:
            count = float(parts[1])
        except ValueError:
            count = float("nan")
        if not math.isfinite(count) or count <= 0 or not re.fullmatch(r"[0-9.eE+-]+",
                                                                       parts[1]):
            raise bad(f"count {parts[1]!r}: valid: a number > 0")
        size = int(parts[0])
        if size in seen:
            raise bad(f"size {size} is listed twice")
        seen.add(size)
        out.append((size, count))
    if not out:
        raise UserError(f"--shape-dist '{name}': no sizes (one SIZE COUNT per line)")
    if len(out) > MAX_SIZES:
        raise UserError(f"--shape-dist '{name}': {len(out)} sizes; at most {MAX_SIZES}")
    return out


def check_sizes(sizes, name: str = "sizes") -> List[Tuple[int, float]]:
    """``sizes`` as the API takes them, [(size, count)] (a square input side and how often
    it occurs), checked as a shape-distribution file is: UserError names ``name``, the
    entry and what is valid."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise UserError(f"{name} {shown(sizes)}: valid: a list of (size, count) pairs")
    out: List[Tuple[int, float]] = []
    for i, pair in enumerate(sizes):
        if i == MAX_SIZES:
            raise UserError(f"{name}: more than {MAX_SIZES} sizes; valid: 1 to {MAX_SIZES}")

        def bad(why: str) -> UserError:
            return UserError(f"{name}[{i}] {shown(pair)}: {why}")

        if isinstance(pair, (str, bytes)) or not hasattr(pair, "__len__") or len(pair) != 2:
            raise bad("expected a (size, count) pair, e.g. (320, 12)")
        size, count = pair
        if isinstance(size, bool) or not isinstance(size, numbers.Real) or \
                not math.isfinite(size) or size != int(size) or not 1 <= size <= MAX_SIDE:
            raise bad(f"size {shown(size)}: valid: an integer from 1 to {MAX_SIDE}")
        if isinstance(count, bool) or not isinstance(count, numbers.Real) or \
                not math.isfinite(count) or count <= 0:
            raise bad(f"count {shown(count)}: valid: a number > 0")
        if any(int(size) == s for s, _ in out):
            raise bad(f"size {size} is listed twice")
        out.append((int(size), float(count)))
    if not out:
        raise UserError(f"{name}: no sizes; valid: 1 to {MAX_SIZES} (size, count) pairs")
    return out
