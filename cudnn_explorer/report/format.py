"""Formatting shared by every table: units, versions, short names. Pure Python."""
from __future__ import annotations

import textwrap
from typing import Dict, List, Optional, Sequence

import tabulate as _tabulate

from ..core.exploration import Environment, cudnn_version
from ..core.records import MIB
from ..core.walltime import SearchTime

__all__ = ["problem_text", "fmt_ms", "fmt_mib", "fmt_size", "fmt_err", "fmt_version", "fmt_cuda",
           "describe_environment",
           "short_status", "short_math", "short_tag", "short_algo", "short_choice", "eager_ms",
           "timing_cells", "DIRECTION_TITLES", "FIND_CALLS", "MATH_ORDER", "TAG_WIDTH", "WIDTH",
           "ELIDED", "distinct_tags",
           "wrap", "table", "grouped_rows", "search_time_text"]

WIDTH = 120  # every default table and line fits a terminal this wide

DIRECTION_TITLES = {"fwd": "forward", "bwd-data": "backward-data",
                    "bwd-filter": "backward-filter"}
FIND_CALLS = {"fwd": "cudnnFindConvolutionForwardAlgorithmEx",
              "bwd-data": "cudnnFindConvolutionBackwardDataAlgorithmEx",
              "bwd-filter": "cudnnFindConvolutionBackwardFilterAlgorithmEx"}
MATH_ORDER = ["DEFAULT_MATH", "TENSOR_OP_MATH", "TENSOR_OP_MATH_ALLOW_CONVERSION", "FMA_MATH"]
_MATH_SHORT = {"DEFAULT_MATH": "DEFAULT", "TENSOR_OP_MATH": "TENSOR_OP",
               "TENSOR_OP_MATH_ALLOW_CONVERSION": "ALLOW_CONV", "FMA_MATH": "FMA"}
TAG_WIDTH = 26  # engine tags longer than this are cut in terminal tables


def short_status(status: str) -> str:
    return status.replace("CUDNN_STATUS_", "")


def short_math(math_type: str) -> str:
    return _MATH_SHORT.get(math_type, math_type)


def short_tag(tag: Optional[str], width: int = TAG_WIDTH) -> str:
    """An engine tag for a terminal table: without its operation prefix (the table is
    about one direction), cut to ``width`` characters with a trailing '~' when longer.
    ``--engines``, ``--json`` and ``--csv`` keep the full tag."""
    if not tag:
        return "?"
    for op in ("ConvFwd_", "ConvBwdData_", "ConvBwdFilter_"):
        if tag.startswith(op):
            tag = tag[len(op):]
            break
    return tag if len(tag) <= width else tag[:width - 1] + "~"


def short_algo(name: str, math_type: str, width: int = 30) -> str:
    """A legacy algorithm and its math type for a terminal table, e.g.
    "IMPLICIT_PRECOMP_GEMM (TENSOR_OP)"; cut to ``width`` with a trailing '~'."""
    text = f"{name} ({short_math(math_type)})"
    return text if len(text) <= width else text[:width - 1] + "~"


def short_choice(pick) -> str:
    """What one of PyTorch's picks ran, for a terminal table."""
    if pick.engine_tag:
        return short_tag(pick.engine_tag)
    if pick.legacy_algo and pick.legacy_algo.endswith(")") and " (" in pick.legacy_algo:
        name, math = pick.legacy_algo[:-1].split(" (", 1)
        return short_algo(name, math)
    return pick.legacy_algo or "?"


def eager_ms(t) -> Optional[float]:
    """The eager wall time per call of a Timing (None: no Timing, or not measured)."""
    return t.eager.median_ms if t is not None and t.eager is not None else None


def fmt_ms(v: Optional[float]) -> str:
    return "-" if v is None or v < 0 else f"{v:.4f}"


def fmt_mib(b: Optional[int]) -> str:
    """Bytes as MiB with 2 decimals; tiny non-zero sizes are not shown as 0.00."""
    if b is None or b < 0:
        return "-"
    if 0 < b < 0.005 * MIB:
        return "<0.01"
    return f"{b / MIB:.2f}"


def fmt_size(b: Optional[int]) -> str:
    """Bytes in a sentence, with the unit: MiB with 2 decimals, or exact bytes where that
    would show under 0.01 MiB (a cap "below <0.01 MiB" says nothing one can set)."""
    shown = fmt_mib(b)
    if shown == "<0.01":
        return f"{b:,} bytes"
    return shown if shown == "-" else f"{shown} MiB"


def fmt_err(r) -> str:
    if r.output_finite is False:
        return "NaN/Inf"
    if r.max_error is None:
        return "-"
    return f"{r.max_error:.1e}"


def timing_cells(t) -> List[str]:
    """The median (ms) and IQR/median cells of a row's re-timing ("-" if not re-timed)."""
    return [fmt_ms(t.median_ms), f"{100 * t.spread:.1f}%"] if t is not None else ["-", "-"]


def fmt_version(v: str) -> str:
    """cuDNN integer version "91900" -> "9.19.0" (unchanged if not an integer)."""
    return cudnn_version(v)


def fmt_cuda(v: str) -> str:
    """CUDA integer version "13000" -> "13.0"."""
    try:
        n = int(v)
    except (TypeError, ValueError):
        return str(v)
    return f"{n // 1000}.{n % 1000 // 10}"


def describe_environment(e: Environment) -> str:
    return (f"GPU {e.device_index}: {e.gpu_name} (compute capability {e.compute_capability}); "
            f"cuDNN {fmt_version(e.cudnn_runtime)} (torch reports {fmt_version(e.cudnn_torch)}); "
            f"torch {e.torch_version} (CUDA {e.torch_cuda}); driver supports CUDA "
            f"{fmt_cuda(e.cuda_driver)}")


def wrap(text: str, first: str = "", width: int = WIDTH) -> List[str]:
    """A prose line (``first`` before it) wrapped to ``width`` columns; continuation lines
    are indented like the text after ``first`` (or like ``text``'s own indent)."""
    indent = " " * len(first) if first else " " * (len(text) - len(text.lstrip()))
    return textwrap.wrap(first + text if first else text, width=width,
                         subsequent_indent=indent + ("  " if not first else ""),
                         break_long_words=False, break_on_hyphens=False) or [first + text]


def grouped_rows(head: List[str], rows: List[List[str]], tail: List[str]) -> List[List[str]]:
    """Table rows of one group (a problem's plans, say): ``head`` before the first row and
    ``tail`` after it, blank cells in their place on the others."""
    blank_head, blank_tail = [""] * len(head), [""] * len(tail)
    return [(head if j == 0 else blank_head) + row + (tail if j == 0 else blank_tail)
            for j, row in enumerate(rows)]


def table(rows, headers) -> str:
    """A plain text table, columns two spaces apart and no wider than their widest cell or
    header (tabulate pads headers by 2 on top of that by default)."""
    saved = _tabulate.MIN_PADDING
    _tabulate.MIN_PADDING = 0
    try:
        return _tabulate.tabulate(rows, headers=headers, tablefmt="simple",
                                  disable_numparse=True)
    finally:
        _tabulate.MIN_PADDING = saved


ELIDED = ("~ inside a config: knobs left out, first those the same engine's other configs "
          "in the table share, so that what differs shows; --json has the full tags")


def distinct_tags(tags: Sequence[Optional[str]], width: int = TAG_WIDTH) -> Dict[str, str]:
    """Each engine tag of ``tags`` (one table's, compared with each other) as a terminal
    table shows it within ``width`` characters, without its operation prefix: whole where
    it fits; else, where another tag of the same engine differs from it, with the knobs
    they share left out (each run of them a '~') so that what differs shows, keeping as
    many of the shared ones from the left as fit; else cut at the end (short_tag)."""
    plain = {t: short_tag(t, 10**6) for t in tags if t}
    out = {}
    for tag, full in plain.items():
        if len(full) <= width:
            out[tag] = full
            continue
        engine, *knobs = full.split("_")
        others = [o.split("_")[1:] for o in set(plain.values())
                  if o != full and o.split("_")[0] == engine]
        differ = [k for k in knobs if any(k not in o for o in others)]
        if not others or not differ:
            out[tag] = short_tag(tag, width)
            continue
        keep = set(differ)
        for k in knobs:  # the shared knobs from the left, while they fit
            if k not in keep and len(_elided(engine, knobs, keep | {k})) <= width:
                keep.add(k)
            elif k not in keep:
                break
        text = _elided(engine, knobs, keep)
        while len(text) > width and keep:  # whole knobs off the end, never half of one
            keep.discard(next(k for k in reversed(knobs) if k in keep))
            text = _elided(engine, knobs, keep)
        out[tag] = text if len(text) <= width else text[:width - 1] + "~"
    return out


def _elided(engine: str, knobs: List[str], keep) -> str:
    text, gap = engine, False
    for k in knobs:
        if k in keep:
            text += ("~" if gap else "_") + k
            gap = False
        else:
            gap = True
    return text + ("~" if gap else "")


def problem_text(p, kind: bool = True) -> str:
    """A compact problem: input, weight, then what is not the default (padding p, stride s,
    dilation d, groups g), dtype, layout (without these two unless ``kind``: a table whose
    problems share them says them once)."""
    x = "x".join(map(str, p.input_shape))
    w = "x".join(map(str, p.weight_shape))
    extra = "" if set(p.padding) == {0} else f" p{'x'.join(map(str, p.padding))}"
    extra += "" if set(p.stride) == {1} else f" s{'x'.join(map(str, p.stride))}"
    extra += "" if set(p.dilation) == {1} else f" d{'x'.join(map(str, p.dilation))}"
    extra += "" if p.groups == 1 else f" g{p.groups}"
    return f"{x} * {w}{extra}" + (f" {p.dtype} {p.layout}" if kind else "")


def search_time_text(t: SearchTime, counts: bool = False) -> str:
    """Where explored directions' wall time went: "legacy rows 1.4 s (tensors and reference
    0.1 s, Find 0.1 s, round 1 0.6 s, round 2 0.1 s, finalists 0.4 s; checks 0.1 s of
    those); engine configs 2.9 s, plan builds 0.1 s, round 1 2.2 s, ..., checks 0.2 s of
    the rounds" (seconds; "" where nothing was recorded). ``counts``: also how many
    configs there were and where they left."""
    parts = []
    if t.legacy_s is not None:
        inside = ([] if t.setup_s is None else [f"tensors and reference {t.setup_s:.1f} s"]) \
            + ([] if t.find_s is None else [f"Find {t.find_s:.1f} s"]) \
            + [f"{name} {s:.1f} s" for name, s in t.legacy_rounds]
        checks = "" if t.legacy_checks_s is None else \
            f"; checks {t.legacy_checks_s:.1f} s of those"
        parts.append(f"legacy rows {t.legacy_s:.1f} s" +
                     (f" ({', '.join(inside)}{checks})" if inside else ""))
    if t.engines_s is not None:
        ahead = "" if not t.ahead_s else \
            f" ({t.ahead_s:.1f} s listing and building ahead, during the legacy rows)"
        inside = ([] if t.builds_s is None else [f"plan builds {t.builds_s:.1f} s{ahead}"]) + \
            [f"{name} {s:.1f} s" for name, s in t.rounds]
        if t.engine_checks_s is not None:
            inside.append(f"checks {t.engine_checks_s:.1f} s of the "
                          f"{'rounds' if t.rounds else 'timings'}")
        text = f"engine configs {t.engines_s:.1f} s" + "".join(f", {p}" for p in inside)
        if counts and t.configs:
            gone = [f"{n:,} {'timed in full' if name == 'finalists' else 'left after ' + name}"
                    for name, n in t.left]
            text += f" ({t.configs:,} configs" + "".join(f"; {g}" for g in gone) + ")"
        parts.append(text)
    return "; ".join(parts)
