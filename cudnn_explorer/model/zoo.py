"""The user's model and its input: a torchvision model by name, a timm model by
``timm:NAME``, or ``pkg.module:factory`` (with keyword arguments); random inputs of the
spec's shape, or the user's own (``--inputs pkg.module:fn``).

Every failure is one UserError that names the bad value (an unknown name lists close
ones; a factory that raises gives its message).
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import os
import re
from typing import List, Optional, Tuple

from ..core.capture import ModelSpec
from ..core.errors import MissingDependencyError, UserError

__all__ = ["build", "check", "torchvision_names", "timm_names", "timm_input", "parse_input",
           "make_inputs", "parse_sizes", "parse_model_args"]

TIMM = "timm:"


def torchvision_names() -> List[str]:
    try:
        import torchvision
    except ImportError:
        raise MissingDependencyError(
            "torchvision is not installed: pip install torchvision (or give your own model "
            "with --model pkg.module:factory)") from None
    return sorted(torchvision.models.list_models())


def _timm():
    try:
        import timm
    except ImportError:
        raise MissingDependencyError("timm is not installed: pip install timm (needed for "
                                     "timm:NAME models)") from None
    return timm


def timm_names() -> List[str]:
    return sorted(_timm().list_models())


def _known(name: str, names: List[str], what: str, valid: str) -> str:
    """``name`` when ``names`` has it, else the UserError naming it, the close names, and
    ``valid``."""
    if name not in names:
        close = difflib.get_close_matches(name, names, n=5, cutoff=0.5)
        raise UserError(f"unknown {what} '{name}'"
                        + (f"; close names: {', '.join(close)}" if close else "")
                        + f"; {valid}")
    return name


def _timm_name(name: str) -> str:
    """NAME of "timm:NAME", checked against timm's list (close names when unknown)."""
    return _known(name[len(TIMM):], timm_names(), "timm model",
                  "any name timm.list_models() lists")


def timm_input(name: str) -> Optional[Tuple[int, ...]]:
    """One sample's shape in the timm model's own pretrained config ("timm:NAME"), or None
    when it names none."""
    bare = _timm_name(name)
    try:
        cfg = _timm().models.get_pretrained_cfg(bare)
    except Exception:  # noqa: BLE001  (a model without a pretrained config)
        return None
    shape = tuple(getattr(cfg, "input_size", None) or ()) if cfg is not None else ()
    return shape if len(shape) == 3 and all(isinstance(s, int) and s > 0 for s in shape) \
        else None


def parse_model_args(text: str) -> dict:
    """--model-args: a JSON object of keyword arguments for the model's factory."""
    import json

    try:
        args = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise UserError(f"--model-args '{text[:60]}': not JSON ({str(e)[:60]}); e.g. "
                        f"'{{\"num_classes\": 10}}'") from None
    if not isinstance(args, dict):
        raise UserError(f"--model-args '{text[:60]}': valid: a JSON object of keyword "
                        f"arguments, e.g. '{{\"num_classes\": 10}}'")
    return args


def parse_input(text: str) -> Tuple[int, ...]:
    """"3x224x224" (C x H x W, or C x L, or C x D x H x W) per sample."""
    parts = str(text).lower().replace(",", "x").split("x")
    try:
        shape = tuple(int(p) for p in parts if p.strip())
    except ValueError:
        raise UserError(f"--input '{text}': expected CxHxW, e.g. 3x224x224") from None
    if len(shape) not in (2, 3, 4) or any(s < 1 for s in shape):
        raise UserError(f"--input '{text}': expected C x L, C x H x W or C x D x H x W, "
                        f"each >= 1, e.g. 3x224x224")
    return shape


def _factory(path: str, flag: str = "--model"):
    mod, _, name = path.partition(":")
    if not mod or not name:
        what = "factory" if flag == "--model" else "function"
        raise UserError(f"{flag} '{path}': expected pkg.module:{what}")
    if "/" in mod or "\\" in mod:
        raise UserError(f"{flag} '{path}': {mod} is a file path; give the module's import "
                        f"name (pkg.module:{name}), with its folder on PYTHONPATH")
    try:
        module = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001  (the user's code: any error is theirs)
        hint = (f"; {mod} is a file: give the module's import name (pkg.module:{name}), "
                f"with its folder on PYTHONPATH") if os.path.isfile(mod) else ""
        raise UserError(f"{flag} '{path}': cannot import {mod}: {type(e).__name__}: {e}"
                        f"{hint}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserError(f"{flag} '{path}': {mod} has no callable {name}")
    return fn


def _torchvision_name(name: str) -> str:
    """``name``, checked against torchvision's list (close names when unknown)."""
    return _known(name, torchvision_names(), "model",
                  "any torchvision model name, or --model pkg.module:factory")


def check(spec: ModelSpec) -> None:
    """That the model ``spec`` names, and its --inputs function, exist (the UserError
    build would raise otherwise), building nothing: a misspelt name is the user's mistake
    (exit 2) on a machine that cannot measure too, and is said before the GPU is asked."""
    if spec.name.startswith(TIMM):
        _timm_name(spec.name)
    elif spec.factory:
        _factory(spec.factory)
    else:
        _torchvision_name(spec.name)
    if spec.inputs:
        _factory(spec.inputs, "--inputs")


def build(spec: ModelSpec, device: str):
    """(model on ``device``, [input batch]) as ``spec`` says; UserError for a bad name or
    a factory that fails."""
    import torch

    if spec.name.startswith(TIMM):
        bare = _timm_name(spec.name)
        try:
            model = _timm().create_model(bare, pretrained=False, **spec.model_args)
        except Exception as e:  # noqa: BLE001  (arguments the model does not take)
            raise UserError(f"timm model '{bare}' cannot be built"
                            f"{' with ' + str(spec.model_args) if spec.model_args else ''}: "
                            f"{type(e).__name__}: {str(e)[:200]}") from None
    elif spec.factory:
        fn = _factory(spec.factory)
        try:
            model = fn(**spec.model_args)
        except Exception as e:  # noqa: BLE001  (the user's code: any error is theirs)
            raise UserError(f"--model '{spec.factory}' raised {type(e).__name__}: {e}") \
                from None
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"--model '{spec.factory}' returned {type(model).__name__}, "
                            f"not a torch.nn.Module")
    else:
        import torchvision

        name = _torchvision_name(spec.name)
        # No trained weights, the backbone's included (segmentation and detection models
        # load it by default, which needs the internet): the kernels do not depend on them.
        kwargs = {"weights": None}
        try:
            params = inspect.signature(torchvision.models.get_model_builder(name)).parameters
        except (TypeError, ValueError):
            params = {}
        if "weights_backbone" in params:
            kwargs["weights_backbone"] = None
        try:
            model = torchvision.models.get_model(name, **kwargs, **spec.model_args)
        except Exception as e:  # noqa: BLE001  (arguments it needs, or ones it does not take)
            given = f" with {spec.model_args}" if spec.model_args else \
                " without arguments (--model-args gives them)"
            raise UserError(f"model '{name}' cannot be built{given}: "
                            f"{type(e).__name__}: {str(e)[:200]}") from None
    model = model.to(device)
    if spec.channels_last:
        if len(spec.input_shape) not in (3, 4):
            raise UserError("--channels-last needs a 2-D or 3-D input (C x H x W or "
                            "C x D x H x W)")
        model = model.to(memory_format=_format(spec))
    return model, make_inputs(spec, device)


def _format(spec: ModelSpec):
    import torch

    return torch.channels_last if len(spec.input_shape) == 3 else torch.channels_last_3d


def make_inputs(spec: ModelSpec, device: str):
    """The input batch of ``spec`` on ``device``: a list of positional arguments, or a
    dict of keyword arguments from the user's ``inputs`` function; random, in the spec's
    layout, by default (4-D and 5-D float tensors in channels_last with it)."""
    import torch

    if spec.inputs:
        fn = _factory(spec.inputs, "--inputs")
        try:
            got = fn(spec.batch, list(spec.input_shape), device)
        except Exception as e:  # noqa: BLE001  (the user's code: any error is theirs)
            raise UserError(f"--inputs '{spec.inputs}' raised {type(e).__name__}: {e}") \
                from None
        if isinstance(got, torch.Tensor):
            got = [got]
        elif isinstance(got, tuple):
            got = list(got)
        if not isinstance(got, (list, dict)):
            raise UserError(f"--inputs '{spec.inputs}' returned {type(got).__name__}: valid: "
                            f"a tensor, a tuple of arguments or a dict of keyword arguments")
    else:
        got = [torch.randn((spec.batch, *spec.input_shape), device=device)]
    if not spec.channels_last:
        return got

    def layout(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dim() in (4, 5):
            return t.contiguous(memory_format=torch.channels_last if t.dim() == 4
                                else torch.channels_last_3d)
        return t
    return {k: layout(v) for k, v in got.items()} if isinstance(got, dict) \
        else [layout(t) for t in got]


def parse_sizes(text: str) -> List[int]:
    """"320:640:32" (start:stop:step, stop included) or "320,416,512": square sizes, each
    an ASCII integer from 1 to 65536, at most 256 of them. The count of a range is worked
    out before any list is made, so a huge range is refused at once; UserError names the
    text and what is valid."""
    from ..core.workload_sizes import MAX_SIDE, MAX_SIZES

    t = str(text).strip()
    form = (f"--sizes '{text}': expected START:STOP:STEP (e.g. 320:640:32) or sizes "
            f"separated by commas (e.g. 320,416,512), each an integer from 1 to {MAX_SIDE}")
    parts = [x.strip() for x in t.split(":" if ":" in t else ",")]
    # ASCII digits only: int() reads "٨" as 8, and a size typed so is not one we show back
    if not t or any(not re.fullmatch(r"[0-9]+", x) for x in parts) or \
            (":" in t and len(parts) != 3):
        raise UserError(form)
    # no int() of a thousand digits: a number past 65536 is refused by its length
    values = [int(x) if len(x.lstrip("0")) <= 6 else MAX_SIDE + 1 for x in parts]
    if ":" in t:
        start, stop, step = values
        if step < 1:
            raise UserError(f"--sizes '{text}': STEP {parts[2]}: valid: an integer >= 1")
        if not (1 <= start <= MAX_SIDE and 1 <= stop <= MAX_SIDE):
            raise UserError(f"--sizes '{text}': START and STOP: valid: integers from 1 to "
                            f"{MAX_SIDE}")
        count = (stop - start) // step + 1 if stop >= start else 0
        if not 1 <= count <= MAX_SIZES:
            raise UserError(f"--sizes '{text}': {count} sizes; valid: 1 to {MAX_SIZES} "
                            f"(START <= STOP, and a STEP that gives at most {MAX_SIZES})")
        return list(range(start, stop + 1, step))
    if any(not 1 <= v <= MAX_SIDE for v in values) or len(values) > MAX_SIZES:
        raise UserError(f"--sizes '{text}': valid: 1 to {MAX_SIZES} sizes, each from 1 to "
                        f"{MAX_SIDE}")
    if len(set(values)) != len(values):
        raise UserError(f"--sizes '{text}': a size is listed twice")
    return values
