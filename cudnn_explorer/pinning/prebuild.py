"""Building a pinned model's plans before its first step: :func:`prebuild`.

A pinned call builds its plan (and compiles a run-time compiled engine) on its first call,
on the thread that makes it: the forward's on the caller's thread, the backward's on
autograd's thread for the device (Note [captured plans], csrc/pinned_plans.cpp: plans are
per thread, as PyTorch's own). A CUDA-graph capture must not build (Note [no builds in a
capture]), so a model is run once before it is captured. ``prebuild`` is that run, made
harmless: one forward and, where the model has parameters that need gradients, one
backward to them, through the very threads that will run the step, and nothing of it
kept (no ``.grad``, buffers and random state as they were).
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Mapping, Optional, Sequence

from ..core.errors import UserError
from ..core.options import flag
from ..core.problem import told
from ..core.pin_report import PinCounts
from . import op

__all__ = ["prebuild"]


def _leaves(out, found):
    """The floating-point tensors that need gradients in a model's output (searched
    through tensors, lists, tuples and dicts)."""
    import torch

    if isinstance(out, torch.Tensor):
        if out.is_floating_point() and out.requires_grad:
            found.append(out)
    elif isinstance(out, (list, tuple)):
        for o in out:
            _leaves(o, found)
    elif isinstance(out, dict):
        for o in out.values():
            _leaves(o, found)
    return found


def prebuild(model, example_inputs: Sequence[Any], kwargs: Optional[Dict[str, Any]] = None,
             *, backward: bool = True) -> PinCounts:
    """Build every plan that one step of the pinned ``model`` on ``example_inputs`` (the
    positional arguments of its forward; ``kwargs`` its keyword ones) will run, before
    the first iteration or a CUDA-graph capture. Call it where the step runs: under the
    same autocast, layout and TF32 settings, with inputs of the step's shapes.

    It runs the model's forward once and, with ``backward`` and parameters that need
    gradients, a backward to those parameters (``torch.autograd.grad``, so no ``.grad``
    is written); the model's buffers (batch-norm statistics) and the random number
    generators are restored afterwards. Returns the op's record of those calls (and
    resets the op's counts): its ``fallbacks`` are what the plan file does not cover or
    what cuDNN refused, each with its reason (under strict pinning too: prebuild reports
    them instead of raising); ``builds`` and ``build_ms`` say what building cost.
    Double-backward calls (gradient penalties) are not run here."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise UserError(f"prebuild: model {type(model).__name__}: give a torch.nn.Module")
    if not isinstance(example_inputs, (list, tuple)):
        example_inputs = (example_inputs,)
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise UserError(f"prebuild: kwargs {told(kwargs)}: give a dict of the forward's "
                        f"keyword arguments")
    backward = flag(backward, "backward")
    try:  # what the forward cannot take at all; what it does with them is its own
        inspect.signature(model.forward).bind(*example_inputs, **(kwargs or {}))
    except TypeError as e:
        raise UserError(f"prebuild: example_inputs ({len(example_inputs)} positional, "
                        f"{len(kwargs or {})} keyword) do not fit {type(model).__name__}"
                        f".forward: {e}") from None
    except ValueError:  # a forward without a signature (a builtin): let it say
        pass
    params = [p for p in model.parameters() if p.requires_grad]
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    devices = sorted({t.device.index for t in (*model.parameters(), *model.buffers(),
                                               *[x for x in example_inputs
                                                 if isinstance(x, torch.Tensor)])
                      if t.device.type == "cuda" and t.device.index is not None})
    strict = op.strict()  # prebuild reports what strict pinning would raise on
    op.set_strict(False)
    op.reset_counts()
    try:
        with torch.random.fork_rng(devices=devices):
            with torch.enable_grad() if backward and params else torch.no_grad():
                out = model(*example_inputs, **(kwargs or {}))
            outs = _leaves(out, []) if backward and params else []
            if outs:
                total = sum(o.float().sum() for o in outs)
                torch.autograd.grad(total, params, allow_unused=True)
            del out, outs
    finally:
        op.set_strict(strict)
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])
    if devices:
        torch.cuda.synchronize()
    return op.pin_counts(reset=True)
