"""The user's model and its input: a torchvision model by name, or ``pkg.module:factory``.

Every failure is one UserError that names the bad value (an unknown name lists close
ones; a factory that raises gives its message).
"""
from __future__ import annotations

import difflib
import importlib
import inspect
from typing import List, Tuple

from ..core.capture import ModelSpec
from ..core.errors import MissingDependencyError, UserError

__all__ = ["build", "torchvision_names", "parse_input", "make_inputs", "parse_sizes"]


def torchvision_names() -> List[str]:
    try:
        import torchvision
    except ImportError:
        raise MissingDependencyError(
            "torchvision is not installed: pip install torchvision (or give your own model "
            "with --model pkg.module:factory)") from None
    return sorted(torchvision.models.list_models())


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


def _factory(path: str):
    mod, _, name = path.partition(":")
    if not mod or not name:
        raise UserError(f"--model '{path}': expected pkg.module:factory")
    try:
        module = importlib.import_module(mod)
    except Exception as e:  # noqa: BLE001  (the user's code: any error is theirs)
        raise UserError(f"--model '{path}': cannot import {mod}: {type(e).__name__}: {e}") \
            from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UserError(f"--model '{path}': {mod} has no callable {name}")
    return fn


def build(spec: ModelSpec, device: str):
    """(model on ``device``, [input batch]) as ``spec`` says; UserError for a bad name or
    a factory that fails."""
    import torch

    if spec.factory:
        fn = _factory(spec.factory)
        try:
            model = fn()
        except Exception as e:  # noqa: BLE001  (the user's code: any error is theirs)
            raise UserError(f"--model '{spec.factory}' raised {type(e).__name__}: {e}") \
                from None
        if not isinstance(model, torch.nn.Module):
            raise UserError(f"--model '{spec.factory}' returned {type(model).__name__}, "
                            f"not a torch.nn.Module")
    else:
        names = torchvision_names()
        if spec.name not in names:
            close = difflib.get_close_matches(spec.name, names, n=5, cutoff=0.5)
            raise UserError(f"unknown model '{spec.name}'"
                            + (f"; close names: {', '.join(close)}" if close else "")
                            + "; any torchvision model name, or --model pkg.module:factory")
        import torchvision

        # No trained weights, the backbone's included (segmentation and detection models
        # load it by default, which needs the internet): the kernels do not depend on them.
        kwargs = {"weights": None}
        try:
            params = inspect.signature(torchvision.models.get_model_builder(spec.name)).parameters
        except (TypeError, ValueError):
            params = {}
        if "weights_backbone" in params:
            kwargs["weights_backbone"] = None
        try:
            model = torchvision.models.get_model(spec.name, **kwargs)
        except Exception as e:  # noqa: BLE001  (a model that needs arguments we do not give)
            raise UserError(f"model '{spec.name}' cannot be built without arguments: "
                            f"{type(e).__name__}: {e}") from None
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


def make_inputs(spec: ModelSpec, device: str) -> List:
    """The input batch of ``spec`` (random, in its layout) on ``device``."""
    import torch

    x = torch.randn((spec.batch, *spec.input_shape), device=device)
    return [x.contiguous(memory_format=_format(spec)) if spec.channels_last else x]


def parse_sizes(text: str) -> List[int]:
    """"320:640:32" (start:stop:step, stop included) or "320,416,512": square sizes."""
    t = str(text).strip()
    try:
        if ":" in t:
            start, stop, step = (int(x) for x in t.split(":"))
            if step < 1:
                raise ValueError
            sizes = list(range(start, stop + 1, step))
        else:
            sizes = [int(x) for x in t.split(",")]
    except ValueError:
        raise UserError(f"--sizes '{text}': expected START:STOP:STEP (e.g. 320:640:32) or "
                        f"sizes separated by commas") from None
    if not sizes or any(s < 1 or s > 65536 for s in sizes) or len(sizes) > 256:
        raise UserError(f"--sizes '{text}': 1 to 256 sizes, each from 1 to 65536")
    if len(set(sizes)) != len(sizes):
        raise UserError(f"--sizes '{text}': a size is listed twice")
    return sizes
