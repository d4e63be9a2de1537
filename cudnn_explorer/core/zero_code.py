"""Zero-code adoption, the pure part: the environment variables that switch the start-up
hook on (read and checked here), the record of a program's convolutions (schema
``cudnn_explorer.convs``) and the report of a pinned run (``cudnn_explorer.run``), with
their merges over processes and the one line each process says at exit.

Pure Python (no torch import): the start-up hook reads the variables before torch is
imported, and the record and report files merge on a machine without a GPU.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from .errors import UserError
from .pin_report import PinCounts, PinnedDirection
from .plans import problem_of_key
from .problem import ConvProblem
from .schema import Record, check_schema, parse_json, shown

# The line the .pth file holds (setup.py installs it; tests/test_zero_code.py checks the
# file against it). With both variables unset it costs two dictionary lookups.
PTH_LINE = ("import os; (os.environ.get('CUDNN_EXPLORER_RECORD') or "
            "os.environ.get('CUDNN_EXPLORER_PLANS')) and "
            "__import__('cudnn_explorer.pinning.startup').pinning.startup.install()")


__all__ = ["PTH_LINE", "VARIABLES", "Settings", "settings_from", "RecordedConv", "Unkeyed",
           "ConvRecord", "CONVS_SCHEMA", "CONVS_VERSION", "merge_records", "read_convs",
           "RunReport", "RUN_SCHEMA", "RUN_VERSION", "merge_reports", "exit_line",
           "per_process", "python_command", "VALUED_OPTIONS"]

CONVS_SCHEMA, CONVS_VERSION = "cudnn_explorer.convs", 1
RUN_SCHEMA, RUN_VERSION = "cudnn_explorer.run", 1

# Note [zero-code variables]: the hook is on when RECORD or PLANS is set (not both).
# Each variable's meaning, as docs/zero-code.md lists them.
VARIABLES = {
    "CUDNN_EXPLORER_RECORD": "a folder: each process writes the convolutions it ran there",
    "CUDNN_EXPLORER_STEPS": "record: stop the program after this many optimizer steps",
    "CUDNN_EXPLORER_PLANS": "a plan file: every convolution it covers runs its plan",
    "CUDNN_EXPLORER_STRICT": "0 or 1: a call the plans do not cover raises",
    "CUDNN_EXPLORER_AHEAD": "0, 1 or a thread count: build the plans ahead (default 1)",
    "CUDNN_EXPLORER_KEEP": "0 or 1: keep the built plans beside the plan file (default 1)",
    "CUDNN_EXPLORER_ALLOW_ENVIRONMENT": "0 or 1: use a plan file from another environment",
    "CUDNN_EXPLORER_REPORT": "a path (%p: the process id): the run's JSON report",
    "CUDNN_EXPLORER_MISSES": "a path: the problem-directions that fell back are appended",
}
_FLAGS = {"0": False, "1": True, "false": False, "true": True, "no": False, "yes": True}


@dataclass(frozen=True)
class Settings(Record):
    """The hook's settings, read from the variables: ``mode`` "record", "run" or "" (off)."""

    mode: str = ""
    record_dir: str = ""
    steps: int = 0
    plans: str = ""
    strict: bool = False
    ahead: int = 1
    keep: bool = True
    allow_environment: bool = False
    report: str = ""
    misses: str = ""


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    v = env.get(name, "")
    if v == "":
        return default
    if v.strip().lower() not in _FLAGS:
        raise UserError(f"{name}={shown(v)}: valid: 0 or 1")
    return _FLAGS[v.strip().lower()]


def _count(env: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    v = env.get(name, "").strip()
    if v == "":
        return default
    if not v.isdigit() or not low <= int(v) <= high:
        raise UserError(f"{name}={shown(v)}: valid: an integer from {low} to {high}")
    return int(v)


def _distinct_files(env: Mapping[str, str], plans: str) -> None:
    """UserError where the report or the misses would be written over the plan file, or
    over each other: a file the process reads, or another output, would be lost."""
    named = [(n, env.get(n, "")) for n in ("CUDNN_EXPLORER_PLANS", "CUDNN_EXPLORER_REPORT",
                                          "CUDNN_EXPLORER_MISSES")]
    named = [(n, p) for n, p in named if p and (n != "CUDNN_EXPLORER_PLANS" or plans)]
    for k, (n, p) in enumerate(named):
        for m, q in named[k + 1:]:
            if os.path.realpath(p) == os.path.realpath(q):
                raise UserError(f"{m}={shown(q)}: the file {n} names too; writing it would "
                                f"lose that: give another path")


def settings_from(env: Mapping[str, str]) -> Settings:
    """The Settings the variables in ``env`` ask for (mode "" when neither RECORD nor
    PLANS is set); UserError naming the first bad variable, its value and what is valid."""
    record, plans = env.get("CUDNN_EXPLORER_RECORD", ""), env.get("CUDNN_EXPLORER_PLANS", "")
    if not record and not plans:
        return Settings()
    if record and plans:
        raise UserError("CUDNN_EXPLORER_RECORD and CUDNN_EXPLORER_PLANS are both set: "
                        "record or run pinned, not both; unset one")
    ahead = _count(env, "CUDNN_EXPLORER_AHEAD", 1, 0, 64)
    _distinct_files(env, plans)
    return Settings(mode="record" if record else "run", record_dir=record,
                    steps=_count(env, "CUDNN_EXPLORER_STEPS", 0, 1, 10**12),
                    plans=plans, strict=_flag(env, "CUDNN_EXPLORER_STRICT", False),
                    ahead=ahead, keep=_flag(env, "CUDNN_EXPLORER_KEEP", True),
                    allow_environment=_flag(env, "CUDNN_EXPLORER_ALLOW_ENVIRONMENT", False),
                    report=env.get("CUDNN_EXPLORER_REPORT", ""),
                    misses=env.get("CUDNN_EXPLORER_MISSES", ""))


# Python's options that take a value: the rest of their word, else the next word
_VALUED_FLAGS = "WX"
_VALUED_LONG = ("--check-hash-based-pycs",)
# as python_command gives them: each followed by its value, a word of its own
VALUED_OPTIONS = tuple(f"-{c}" for c in _VALUED_FLAGS) + _VALUED_LONG


def python_command(words: Sequence[str]) -> Tuple[List[str], str, str]:
    """What follows a Python interpreter on a command line, as Python reads it: (its
    options, each a word: clusters cut before ``m``/``c`` and a valued flag given as the
    flag and its value; what runs: "m", "c", "-", "script" or "" (nothing); the module,
    the code or the script)."""
    opts: List[str] = []
    i = 0
    while i < len(words):
        w = words[i]
        nxt = words[i + 1] if i + 1 < len(words) else ""
        if w == "--":
            return opts, ("script" if nxt else ""), nxt
        if w == "-":
            return opts, "-", ""
        if not w.startswith("-"):
            return opts, "script", w
        if w.startswith("--"):
            opts.append(w)
            if w in _VALUED_LONG:
                opts.append(nxt)
                i += 1
            i += 1
            continue
        cluster = "-"
        for j, c in enumerate(w[1:], 1):
            if c in "mc":
                if cluster != "-":
                    opts.append(cluster)
                return opts, c, w[j + 1:] or nxt
            if c in _VALUED_FLAGS:
                if cluster != "-":
                    opts.append(cluster)
                cluster = "-"
                opts += [f"-{c}", w[j + 1:] or nxt]
                i += 0 if w[j + 1:] else 1
                break
            cluster += c
        if cluster != "-":
            opts.append(cluster)
        i += 1
    return opts, "", ""


def per_process(path: str, pid: int) -> str:
    """``path`` with each "%p" replaced by the process id ``pid`` (as LLVM_PROFILE_FILE
    names one file per process)."""
    return path.replace("%p", str(pid))


# ---------------------------------------------------------------------------- the record
@dataclass(frozen=True)
class RecordedConv(Record):
    """One problem-direction as the op keys it (Note [plan keys]): its ``calls`` (host
    calls, summed over processes), the ``problem`` and ``direction`` the key is (None and
    "" where the key is not one: ``why``), and the layers that ran it where known."""

    key: List[int]
    description: str
    calls: int = 0
    direction: str = ""
    problem: Optional[ConvProblem] = None
    why: str = ""
    layers: List[str] = field(default_factory=list)


@dataclass(frozen=True)
class Unkeyed(Record):
    """Calls that reached no key (CPU tensors, an unsupported dtype), by ``reason``."""

    reason: str
    calls: int = 0


@dataclass(frozen=True)
class ConvRecord(Record):
    """The convolutions a program ran, merged over its ``processes`` (or one process's
    part: ``pid`` and ``host`` set). ``steps``: optimizer steps seen (the most of any
    process); ``command``: what ran, as given."""

    convs: List[RecordedConv] = field(default_factory=list)
    unkeyed: List[Unkeyed] = field(default_factory=list)
    processes: int = 1
    steps: int = 0
    command: List[str] = field(default_factory=list)
    host: str = ""
    pid: int = 0
    created: str = ""
    tool_version: str = ""
    schema: str = CONVS_SCHEMA
    schema_version: int = CONVS_VERSION

    @property
    def calls(self) -> int:
        return sum(c.calls for c in self.convs)

    def to_json(self, indent: Optional[int] = 1) -> str:
        return json.dumps(self.to_dict(), indent=indent) + ("\n" if indent else "")

    @classmethod
    def read(cls, data, what: str = "record file") -> "ConvRecord":
        d = parse_json(data)
        check_schema(d, CONVS_SCHEMA, (CONVS_VERSION,), what)
        return cls.from_dict(d, what)


def with_problem(c: RecordedConv) -> RecordedConv:
    """``c`` with its problem and direction filled in from its key (or why not)."""
    try:
        problem, direction = problem_of_key(c.key)
    except UserError as e:
        return replace(c, problem=None, direction="", why=str(e))
    return replace(c, problem=problem, direction=direction, why="")


def merge_records(parts: Iterable[ConvRecord], command: Iterable[str] = (), created: str = "",
                  tool_version: str = "") -> ConvRecord:
    """One record of ``parts`` (each a process's part, or a merged record): calls summed
    per key and per unkeyed reason, layers joined, each key's problem filled in; sorted
    by calls, most first."""
    convs: Dict[Tuple[int, ...], RecordedConv] = {}
    unkeyed: Dict[str, int] = {}
    processes, steps = 0, 0
    for p in parts:
        processes += max(1, p.processes) if not p.pid else 1
        steps = max(steps, p.steps)
        for c in p.convs:
            k = tuple(c.key)
            had = convs.get(k)
            convs[k] = c if had is None else replace(
                had, calls=had.calls + c.calls,
                layers=had.layers + [n for n in c.layers if n not in had.layers])
        for u in p.unkeyed:
            unkeyed[u.reason] = unkeyed.get(u.reason, 0) + u.calls
    rows = sorted((with_problem(c) for c in convs.values()),
                  key=lambda c: (-c.calls, c.description))
    return ConvRecord(convs=rows, unkeyed=[Unkeyed(r, n) for r, n in sorted(unkeyed.items())],
                      processes=processes, steps=steps, command=list(command), created=created,
                      tool_version=tool_version)


def read_convs(path: str, what: str = "record file") -> ConvRecord:
    """The record at ``path``: a record file, or a misses file (one part per line, as
    CUDNN_EXPLORER_MISSES appends them), merged; UserError naming the file and the bad
    line or field."""
    from .files import read_text

    text = read_text(path, what)
    lines = [(i + 1, ln) for i, ln in enumerate(text.splitlines()) if ln.strip()]
    try:
        # a misses file: a part a line, every line an object; a record file is one object
        if len(lines) < 2 or not all(ln.lstrip().startswith("{") for _, ln in lines):
            return ConvRecord.read(text, what)
        parts = []
        for n, ln in lines:
            try:
                parts.append(ConvRecord.read(ln))
            except UserError as e:
                cut = " (a process stopped while appending it? remove that line)"
                raise UserError(f"line {n}: {e}{cut if 'not valid JSON' in str(e) else ''}") \
                    from None
        return merge_records(parts)
    except UserError as e:
        raise UserError(f"{what} '{path}': {e}") from None


# ---------------------------------------------------------------------------- the run report
@dataclass(frozen=True)
class RunReport(Record):
    """What a pinned run did: the op's counts (merged over ``processes``), the plan file
    it loaded (``plans``), and ``not_loaded``: why the file was not loaded, where it was
    not (every call then ran PyTorch's own convolution)."""

    counts: PinCounts = field(default_factory=PinCounts)
    plans: str = ""
    not_loaded: str = ""
    processes: int = 1
    host: str = ""
    pid: int = 0
    schema: str = RUN_SCHEMA
    schema_version: int = RUN_VERSION

    @classmethod
    def read(cls, data, what: str = "run report") -> "RunReport":
        d = parse_json(data)
        check_schema(d, RUN_SCHEMA, (RUN_VERSION,), what)
        return cls.from_dict(d, what)


def merge_reports(reports: Iterable[RunReport]) -> RunReport:
    """One report of ``reports``: the counts summed per problem-direction (and per
    fallback reason for calls that reached no key)."""
    rows: Dict[Tuple, PinnedDirection] = {}
    plans, not_loaded, n = "", "", 0
    for r in reports:
        n += 1 if r.pid else max(1, r.processes)
        plans = plans or r.plans
        not_loaded = not_loaded or r.not_loaded
        for d in r.counts.directions:
            k = (tuple(d.key), d.description if not d.key else "", d.reason if not d.key else "")
            had = rows.get(k)
            rows[k] = d if had is None else replace(
                had, pinned_calls=had.pinned_calls + d.pinned_calls,
                fallback_calls=had.fallback_calls + d.fallback_calls, builds=had.builds + d.builds,
                build_ms=had.build_ms + d.build_ms, covered=had.covered or d.covered,
                ran=had.ran or d.ran, reason=had.reason or d.reason)
    directions = sorted(rows.values(), key=lambda d: (not d.covered, d.description))
    return RunReport(counts=PinCounts(directions=directions), plans=plans,
                     not_loaded=not_loaded, processes=n)


def exit_line(report: RunReport) -> str:
    """The one line a pinned run says at exit, e.g. "cudnn_explorer: 12,345 of 12,400
    convolution calls ran pinned plans; 55 fell back (2 problem-directions not in the
    file)"."""
    c = report.counts
    head = f"cudnn_explorer: {c.pinned_calls:,} of {c.calls:,} convolution calls ran pinned plans"
    if report.not_loaded:
        return f"{head}: the plan file was not loaded ({report.not_loaded})"
    if not c.fallback_calls:
        return head
    missing = [d for d in c.fallbacks if d.key and not d.covered]
    why = [f"{len(missing)} problem-direction{'s' if len(missing) != 1 else ''} not in the file"] \
        if missing else []
    others = [d for d in c.fallbacks if not (d.key and not d.covered)]
    if others:
        n = sum(d.fallback_calls for d in others)
        why.append(f"{n:,} call{'s' if n != 1 else ''}: {others[0].reason}"
                   + (f", and {len(others) - 1} more reasons" if len(others) > 1 else ""))
    return f"{head}; {c.fallback_calls:,} fell back ({'; '.join(why)})"


def pid_host() -> Tuple[int, str]:
    """(this process's id, this machine's name)."""
    import socket

    return os.getpid(), socket.gethostname()
