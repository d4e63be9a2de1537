"""The reading rules of every saved record: a record is a dataclass whose fields are
annotated; ``from_dict`` checks each value against its annotation (nested records
included) and names the path of a bad field. Pure Python (no torch import): the saved
files, the results store and the child processes' results all go through it.
"""
from __future__ import annotations

import datetime
import functools
import json
import math
import typing
from dataclasses import MISSING, asdict, fields

from .errors import UserError
from .problem import ConvProblem, clip, told

__all__ = ["Record", "Signed", "INT64_MAX", "FLOAT_MAX", "shown", "parse_json", "utc_now",
           "convert", "check_version", "check_schema"]

def what(hint) -> str:
    """What a value of type ``hint`` must be, in words."""
    if hint is bool:
        return "true or false"
    if hint is int:
        return "an integer >= 0"
    if hint is Signed:
        return "an integer"
    if hint is float:
        return "a finite number >= 0"
    if hint is str:
        return "a string"
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return f"{what(inner[0])} or null"
    if hint is list or origin in (list, tuple):
        return "a list"
    if hint is object:
        return "plain JSON with finite numbers"
    return "an object"


def convert(value, hint, path: str):
    """``value`` read from JSON as the annotated type ``hint``, or UserError naming
    ``path``. Every number a result holds is a count, a size, a time or an error bound:
    finite and >= 0. Records nest by their annotations (List[AlgoResult], Optional[Timing])."""
    origin = typing.get_origin(hint)
    if origin is typing.Union:
        if value is None:
            return None
        (inner,) = [a for a in typing.get_args(hint) if a is not type(None)]
        return convert(value, inner, path)
    if isinstance(hint, type) and issubclass(hint, Record):
        if not isinstance(value, dict):
            raise UserError(f"{path}: expected an object, got {shown(value)}")
        return hint.from_dict(value, path)
    if hint is ConvProblem:
        try:
            return ConvProblem.from_dict(value)
        except UserError as e:  # its messages start with "problem"
            raise UserError(f"{path}{str(e)[len('problem'):]}") from None
    ok = _SCALARS.get(hint)
    if ok is not None:
        if not ok(value):
            raise UserError(f"{path}: {shown(value)} is not {what(hint)}")
        return float(value) if hint is float else value
    if origin is tuple:
        items = typing.get_args(hint)
        if not isinstance(value, list) or len(value) != len(items):
            raise UserError(f"{path}: expected a list of {len(items)}, got {shown(value)}")
        return [convert(v, h, f"{path}[{i}]") for i, (v, h) in enumerate(zip(value, items))]
    if hint is list or origin is list:
        if not isinstance(value, list):
            raise UserError(f"{path}: expected a list, got {shown(value)}")
        (item,) = typing.get_args(hint) or (object,)
        check = _SCALARS.get(item)
        if check is not None and item is not float and all(check(v) for v in value):
            return list(value)  # a list of scalars that pass, in one go (most of a plan file)
        return [convert(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    if hint is dict or origin is dict:
        if not isinstance(value, dict):
            raise UserError(f"{path}: expected an object, got {shown(value)}")
        _, item = typing.get_args(hint) or (str, object)
        return {k: convert(v, item, f"{path}.{k}") for k, v in value.items()}
    raise TypeError(f"records: no reading rule for {hint!r}")  # a record type we wrote


INT64_MAX = 2**63 - 1
FLOAT_MAX = 1e300
Signed = typing.NewType("Signed", int)  # an int64 that may be negative (a knob's value)


def plain(v) -> bool:
    """Free-form JSON (knob lists, engine summaries, options): any structure, but every
    number finite and within int64."""
    if isinstance(v, dict):
        return all(isinstance(k, str) and plain(x) for k, x in v.items())
    if isinstance(v, list):
        return all(plain(x) for x in v)
    if isinstance(v, float):
        return math.isfinite(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return -INT64_MAX <= v <= INT64_MAX
    return v is None or isinstance(v, (str, bool))


# The scalar annotations' checks, made once (convert runs for every field of every record).
_SCALARS = {
    bool: lambda v: isinstance(v, bool),
    int: lambda v: isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= INT64_MAX,
    Signed: lambda v: isinstance(v, int) and not isinstance(v, bool)
    and -INT64_MAX <= v <= INT64_MAX,
    float: lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
    and 0 <= v <= FLOAT_MAX,
    str: lambda v: isinstance(v, str),
    object: plain,
}


def shown(value) -> str:
    """``value`` as a saved file writes it, cut to 40 characters for an error message;
    what JSON cannot write (a NaN, a numpy integer, an integer too long to print) as its
    repr or its size: never raises."""
    try:
        text = json.dumps(value) if not isinstance(value, float) or math.isfinite(value) \
            else repr(value)
    except (TypeError, ValueError, RecursionError):
        return told(value)
    return clip(text)


def check_version(value, versions, what: str) -> None:
    """UserError unless a saved file's ``schema_version`` ``value`` is one of ``versions``
    (integers): it names ``what`` (e.g. "plan file"), the value as written and its JSON
    type where that is the fault ("1", a string, is not 1), and the versions this
    cudnn_explorer reads."""
    if isinstance(value, int) and not isinstance(value, bool) and value in versions:
        return
    reads = (f"version {versions[0]}" if len(versions) == 1 else
             f"versions {versions[0]} to {versions[-1]}" if len(versions) > 2 and
             list(versions) == list(range(versions[0], versions[-1] + 1))
             else f"versions {', '.join(map(str, versions))}")
    if value is None:
        why = "missing"
    elif isinstance(value, bool) or not isinstance(value, int):
        kind = {str: "a string", float: "a number with a decimal point", bool: "a boolean",
                list: "a list", dict: "an object"}.get(type(value), type(value).__name__)
        why = f"{shown(value)} is {kind}, not an integer"
    else:
        why = shown(value)
    newer = isinstance(value, int) and not isinstance(value, bool) and value > max(versions)
    raise UserError(f"{what} schema_version {why}: this cudnn_explorer reads {reads}"
                    + ("; upgrade cudnn_explorer" if newer else ""))


class Record:
    """``from_dict`` for every record: known keys only (newer files may carry more), each
    value checked against its field's annotation and converted (nested records
    included), so a malformed file fails on load with the path of the bad field."""

    @classmethod
    def from_dict(cls, d: dict, path: str = ""):
        path = path or cls.__name__
        if not isinstance(d, dict):
            raise UserError(f"{path}: expected an object, got {shown(d)}")
        kw = {}
        for name, hint, required in _reading(cls):
            if name in d:
                kw[name] = convert(d[name], hint, f"{path}.{name}")
            elif required:
                raise UserError(f"{path}.{name}: missing")
        return cls(**kw)

    def to_dict(self) -> dict:
        return asdict(self)


@functools.lru_cache(maxsize=None)
def _reading(cls) -> tuple:
    """(name, annotation, required) of each field of the record class ``cls``, resolved
    once per class: typing.get_type_hints evaluates every string annotation again on each
    call, which was 2.0 s of the 2.8 s a saved ResNet-50 sweep (9,619 records) took to
    load."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name], f.default is MISSING and f.default_factory is MISSING)
                 for f in fields(cls))


def utc_now() -> str:
    """Now, in UTC, ISO 8601 to the second: every record's ``created``."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_json(data):
    """The JSON value of a saved file's text or bytes; UserError when it is not JSON."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        raise UserError(f"not valid JSON: {str(e)[:80]}") from None
    except TypeError:
        raise UserError(f"expected a saved file's text, got a {type(data).__name__}") from None


def check_schema(d, name: str, versions, what: str) -> int:
    """The ``schema_version`` of ``d``, a saved document whose ``schema`` must be
    ``name`` (``what`` it is, in words: "result", "plan file") and whose version one of
    ``versions`` (those this cudnn_explorer reads). UserError otherwise, in one format for
    every document: "not a cudnn_explorer WHAT: schema is X, expected NAME", or "WHAT
    schema_version X: this cudnn_explorer reads version(s) ..." (and, for a newer one,
    "; upgrade cudnn_explorer")."""
    if not isinstance(d, dict) or d.get("schema") != name:
        got = d.get("schema") if isinstance(d, dict) else d
        raise UserError(f"not a cudnn_explorer {what}: schema is {shown(got)}, expected "
                        f"{name!r}")
    version = d.get("schema_version")
    check_version(version, tuple(sorted(versions)), what)
    return version
