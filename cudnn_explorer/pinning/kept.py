"""Kept plans: the plans of a plan file as cuDNN serializes them once built, in a file
beside it, so that a later process restores them in milliseconds instead of building
(and, for run-time compiled engines, compiling) them on its first step.

Note [kept plans] in csrc/pinned_plans.cpp says what cuDNN keeps and checks. cuDNN
refuses a form from another cuDNN version or SM count, but not one from another GPU name
or SM version, and a restored plan computes whatever problem its form names. So the file
is for one environment exactly (``environment`` below: cuDNN's full version,
cudnn-frontend's, the GPU's name, compute capability and SM count), each plan carries a
SHA-256 of its key, tag and form, and the op checks a restored plan's engine config
against the plan file's. A file for another environment, a corrupt file or a plan whose
checksum fails is not used: the plan is built from its engine config, and the file is
written again once the builds are done.

Schema ``cudnn_explorer.kept_plans`` version 1, gzip-compressed JSON: ``environment``,
and ``plans``: per plan ``key`` (Note [plan keys]), ``tag``, ``runtime_compiled``,
``sha256`` and ``form`` (base64).
"""
from __future__ import annotations

import base64
import gzip
import hashlib
import json
from typing import List, Optional, Tuple

from ..core.errors import UserError
from ..core.files import GZIP_MAGIC, write_atomic
from ..core.schema import check_schema, shown

__all__ = ["KEPT_SCHEMA", "kept_path", "environment", "read_kept", "write_kept", "foreign"]

KEPT_SCHEMA = "cudnn_explorer.kept_plans"
KEPT_VERSION = 1

# (key, tag, form): a plan as the op takes and gives it
Kept = Tuple[List[int], str, bytes]


def kept_path(plans_path: str) -> str:
    """Where the kept plans of the plan file at ``plans_path`` live: beside it."""
    return plans_path + ".kept"


def environment(device: int) -> dict:
    """What a kept plan is valid for (Note [kept plans]): the cuDNN loaded (its full
    version), the cudnn-frontend built in, and the GPU's name, compute capability and
    SM count."""
    import torch

    from ..measure import native

    props = torch.cuda.get_device_properties(device)
    return {"cudnn": native.runtime_info()["cudnn"],
            "cudnn_frontend": native.build_info().get("cudnn_frontend", ""),
            "gpu": props.name, "compute_capability": f"{props.major}.{props.minor}",
            "sm_count": props.multi_processor_count}


def _digest(key: List[int], tag: str, form: bytes) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([list(key), tag]).encode())
    h.update(form)
    return h.hexdigest()


def read_kept(path: str, env: dict) -> Tuple[List[Kept], Optional[str]]:
    """(the plans kept at ``path`` for the environment ``env``, a note or None). No file
    is no plans and no note; a file that cannot be read, is not kept plans, or is for
    another environment gives no plans and says so in the note; plans whose checksum
    fails are left out, counted in the note. Never raises for what the file holds."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return [], None
    except OSError as e:
        return [], f"kept plans '{path}' not read ({e.strerror}): building them"
    try:
        d = json.loads(gzip.decompress(raw))
        check_schema(d, KEPT_SCHEMA, (KEPT_VERSION,), "kept plans file")
    except (OSError, EOFError, ValueError, UserError) as e:
        why = str(e) if isinstance(e, UserError) else "not a gzip-compressed JSON file"
        return [], f"kept plans '{path}' not used ({why}): building them"
    if d.get("environment") != env:
        theirs = d.get("environment") if isinstance(d.get("environment"), dict) else {}
        diff = ", ".join(f"{k} {theirs.get(k)!r} here {v!r}" for k, v in env.items()
                         if theirs.get(k) != v) or "a different environment"
        return [], f"kept plans '{path}' are for another environment ({diff}): building them"
    plans, bad = [], 0
    for p in d.get("plans") if isinstance(d.get("plans"), list) else []:
        try:
            key, tag = [int(v) for v in p["key"]], str(p["tag"])
            form = base64.b64decode(p["form"], validate=True)
            ok = _digest(key, tag, form) == p["sha256"]
        except (KeyError, TypeError, ValueError):
            ok = False
        if ok:
            plans.append((key, tag, form))
        else:
            bad += 1
    note = (f"kept plans '{path}': {bad} plan(s) failed their checksum: building them"
            if bad else None)
    return plans, note


def foreign(path: str) -> Optional[str]:
    """What the file at ``path`` is where it is something other than kept plans (any
    version), which writing kept plans there would lose; None where there is no file, an
    empty one, kept plans, or a gzip file cut short or damaged (kept plans a copy broke:
    written again)."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"a file that cannot be read ({e.strerror})"
    if not raw:
        return None
    if not raw.startswith(GZIP_MAGIC):
        return "not gzip-compressed"
    try:
        d = json.loads(gzip.decompress(raw))
    except (OSError, EOFError, ValueError):
        return None
    if not isinstance(d, dict) or d.get("schema") != KEPT_SCHEMA:
        return f"of schema {shown(d.get('schema') if isinstance(d, dict) else d)}"
    return None


def write_kept(path: str, env: dict, plans) -> int:
    """Write ``plans`` ((key, tag, form, runtime_compiled) each, as the op gives them)
    to ``path`` for ``env``, atomically (a temporary file renamed over it: a kill leaves
    the old file or the new one); returns how many."""
    rows = [{"key": list(key), "tag": tag, "runtime_compiled": bool(rc),
             "sha256": _digest(key, tag, form), "form": base64.b64encode(form).decode()}
            for key, tag, form, rc in sorted(plans, key=lambda p: (p[1], list(p[0])))]
    doc = {"schema": KEPT_SCHEMA, "schema_version": KEPT_VERSION, "environment": env,
           "plans": rows}
    write_atomic(path, json.dumps(doc), compress=True)
    return len(rows)
