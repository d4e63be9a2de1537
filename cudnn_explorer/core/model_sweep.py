"""A model sweep: the capture of a model and one Exploration per unique problem. Pure.

Schema ``cudnn_explorer.sweep``, version 2: ``capture`` (schema cudnn_explorer.capture),
``options`` (the ExploreOptions every problem was explored with, its directions aside),
``profile`` ("quick" or "thorough"), ``environment``, ``pytorch_run`` (PyTorch's own run of
the whole model per mode, core/model_run.py; null when not run) and ``entries``: one per
unique problem, in the capture's order, with its exploration (schema
cudnn_explorer.exploration) or the error that stopped it. ``complete`` is false for a
sweep that was interrupted: the entries it has are final. Version 1 files (no
``pytorch_run``) still load.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import List, Optional

from .capture import Capture
from .errors import UserError
from .options import OLD_NAMES, PROFILES
from .model_run import ModelRun
from .exploration import Environment, Exploration
from .schema import check_schema, parse_json, shown

__all__ = ["SWEEP_SCHEMA", "SWEEP_VERSION", "SweepEntry", "ModelSweep"]

SWEEP_SCHEMA = "cudnn_explorer.sweep"
SWEEP_VERSION = 2
READS_VERSIONS = (1, 2)


@dataclass(frozen=True)
class SweepEntry:
    """Unique problem ``index`` of the capture: its exploration, or why there is none."""

    index: int
    exploration: Optional[Exploration] = None
    error: str = ""
    seconds: Optional[float] = None

    def to_dict(self) -> dict:
        return {"index": self.index, "error": self.error, "seconds": self.seconds,
                "exploration": None if self.exploration is None
                else self.exploration.to_dict()}

    @cached_property
    def json_text(self) -> str:
        """The entry as the sweep's file holds it: ``json.dumps(indent=1)`` at the depth of
        an item of ``entries``, made once (Note [sweep file written often])."""
        return "  " + json.dumps(self.to_dict(), indent=1).replace("\n", "\n  ")


@dataclass(frozen=True)
class ModelSweep:
    capture: Capture
    entries: List[SweepEntry] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    profile: str = "thorough"
    environment: Environment = field(default_factory=Environment)
    complete: bool = False
    tool_version: str = ""
    created: str = ""
    wall_s: Optional[float] = None
    pytorch_run: Optional[ModelRun] = None

    def entry(self, index: int) -> Optional[SweepEntry]:
        return next((e for e in self.entries if e.index == index), None)

    @property
    def missing(self) -> List[int]:
        """Indices of unique problems with no entry (the sweep was interrupted)."""
        done = {e.index for e in self.entries}
        return [i for i in range(len(self.capture.problems)) if i not in done]

    def to_dict(self) -> dict:
        return {**self._head(), "entries": [e.to_dict() for e in self.entries]}

    def _head(self) -> dict:
        """Every field of the file but ``entries`` (which comes last)."""
        return {"schema": SWEEP_SCHEMA, "schema_version": SWEEP_VERSION,
                "tool_version": self.tool_version, "created": self.created,
                "profile": self.profile, "complete": self.complete, "wall_s": self.wall_s,
                "options": dict(self.options), "environment": self.environment.to_dict(),
                "capture": self.capture.to_dict(),
                "pytorch_run": None if self.pytorch_run is None else self.pytorch_run.to_dict()}

    # Note [sweep file written often]: a sweep's file is written again after every problem
    # (jobs/sweep.py), so that a kill loses only the problem in flight. Serialising every
    # entry each time grew with the square of the problems: between its problems, an H200
    # ResNet-50 sweep (23 problems, an 8.6 MB file) spent 6.5 s of its 63.6 s loop, and a
    # five-size sweep 118.7 s of 347.1 s (95 problems). Serialising the first's whole file
    # took 0.57 s on a development machine, the second's 36 MB 3.0 s. Each entry
    # is frozen, so its text is made once (SweepEntry.json_text) and the file is those
    # texts joined under the other fields': the same bytes as json.dumps of to_dict(),
    # indent 1 (0.011 s a write for the ResNet-50 sweep once its entries' texts are made).
    def to_json(self) -> str:
        text = json.dumps({**self._head(), "entries": []}, indent=1)
        if not self.entries:
            return text
        return (text[:-len("[]\n}")] + "[\n" + ",\n".join(e.json_text for e in self.entries)
                + "\n ]\n}")

    @classmethod
    def from_dict(cls, d: dict) -> "ModelSweep":
        """A saved sweep, every part checked; UserError names the bad one."""
        check_schema(d, SWEEP_SCHEMA, READS_VERSIONS, "sweep")
        try:
            capture = Capture.from_json_dict(d.get("capture"))
        except UserError as e:
            raise UserError(f"capture: {e}") from None
        entries, seen = [], set()
        raw = d.get("entries")
        if not isinstance(raw, list):
            raise UserError(f"entries: {shown(raw)} is not a list")
        for k, e in enumerate(raw):
            if not isinstance(e, dict):
                raise UserError(f"entries[{k}]: expected an object, got {shown(e)}")
            i = e.get("index")
            if not isinstance(i, int) or isinstance(i, bool) or not \
                    0 <= i < len(capture.problems) or i in seen:
                raise UserError(f"entries[{k}].index: {shown(i)} is not a new index of "
                                f"the {len(capture.problems)} captured problems")
            seen.add(i)
            exp = None
            if e.get("exploration") is not None:
                if not isinstance(e["exploration"], dict):
                    raise UserError(f"entries[{k}].exploration: expected an object")
                try:
                    exp = Exploration.from_dict(e["exploration"])
                except UserError as err:
                    raise UserError(f"entries[{k}].exploration: {err}") from None
                if exp.problem != capture.problems[i].problem:
                    raise UserError(f"entries[{k}].exploration: its problem is not captured "
                                    f"problem {i}")
            secs = e.get("seconds")
            if secs is not None and (not isinstance(secs, (int, float)) or secs < 0):
                raise UserError(f"entries[{k}].seconds: {shown(secs)} is not a time")
            if not isinstance(e.get("error", ""), str):
                raise UserError(f"entries[{k}].error: not a string")
            entries.append(SweepEntry(i, exp, e.get("error", ""), secs))
        for key in ("tool_version", "created", "profile"):
            if not isinstance(d.get(key, ""), str):
                raise UserError(f"{key}: not a string")
        if not isinstance(d.get("options", {}), dict):
            raise UserError("options: not an object")
        # a sweep saved before the staged search says "deep" for thorough
        profile = OLD_NAMES.get(d.get("profile", "thorough"), d.get("profile", "thorough"))
        if profile not in PROFILES:
            raise UserError(f"profile: {shown(d.get('profile'))}: valid: "
                            f"{', '.join(PROFILES)}")
        run = None
        if d.get("pytorch_run") is not None:
            run = ModelRun.from_dict(d["pytorch_run"], "pytorch_run")
            n = len(capture.problems)
            bad = next((c for m in run.modes for s in m.sizes
                        for c in s.calls + ([s.peak_call] if s.peak_call else [])
                        if not -1 <= c.problem < n), None)
            if bad is not None:
                raise UserError(f"pytorch_run: a call names problem {bad.problem}, not one "
                                f"of the {n} captured problems")
        return cls(capture=capture, entries=entries, options=d.get("options") or {},
                   profile=profile,
                   environment=Environment.from_dict(d.get("environment") or {},
                                                     "environment"),
                   complete=d.get("complete") is True, tool_version=d.get("tool_version", ""),
                   created=d.get("created", ""),
                   wall_s=d.get("wall_s") if isinstance(d.get("wall_s"), (int, float))
                   else None, pytorch_run=run)

    @classmethod
    def from_json(cls, data) -> "ModelSweep":
        d = parse_json(data)
        if not isinstance(d, dict):
            raise UserError("not a cudnn_explorer sweep: top level is not an object")
        return cls.from_dict(d)
