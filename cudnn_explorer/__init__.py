"""cudnn_explorer: what cuDNN does with a convolution, what PyTorch picks, what it costs.

``import cudnn_explorer`` is lean: it loads neither torch, the native extension nor
CUDA. The jobs (:func:`explore` one problem, :func:`sweep_model` a whole model,
:func:`advise` benchmark mode on or off for a workload, :func:`capture` a model's
convolutions, :func:`tune` a program's recorded convolutions into a plan file) and pinning
(:func:`pin` a model to a plan file's engine configs, :func:`unpin`,
:func:`pinned` for functional code, :func:`pin_counts` for what ran pinned, :func:`prebuild`
to build a pinned model's plans before its first step, :func:`wait_for_plans` for those
pin() builds ahead, :func:`plans_made` for how each was made) and the GPU
functions (:func:`run_algorithm`, :func:`reference`,
:func:`environment`, :func:`info`) import them on first call and raise one clear
error (MissingDependencyError) when something is missing. Each returns records (core/),
the same ones the command line renders.

Layers: ``core/`` (pure: problem, options, records, captures and sweeps, analysis, log
parsers), ``measure/`` (the GPU: native gate, legacy Find and re-timing, engine configs,
PyTorch's children, the pipeline), ``model/`` (a whole model: capture, zoo, sweep),
``pinning/`` (the pinned convolution op, pin and unpin), ``store/`` (the results
store), ``jobs/`` (what each command does), ``report/`` (tables,
CSV, plots), ``cli/`` (the command line). Each imports only the layers before it.
"""
from .core.errors import (ChildError, CudnnError, ExplorerError, GpuError,
                          MissingDependencyError, ResourceError, UserError)
from .core.capture import ModelSpec
from .core.options import ExploreOptions
from .core.problem import DIRECTIONS, ConvProblem
from .core.exploration import SCHEMA_NAME, SCHEMA_VERSION, Environment, Exploration
from .core.records import AlgoResult, DirectionResult, WorkspaceEntry

from .core.version import __version__

__all__ = [
    "__version__", "ConvProblem", "DIRECTIONS", "ExploreOptions", "ModelSpec", "explore",
    "sweep_model", "advise", "capture", "run_algorithm", "reference",
    "environment", "info", "Exploration", "DirectionResult", "AlgoResult", "WorkspaceEntry",
    "Environment", "SCHEMA_NAME", "SCHEMA_VERSION", "ExplorerError", "UserError",
    "MissingDependencyError", "CudnnError", "ResourceError", "GpuError", "ChildError",
    "pin", "unpin", "pinned", "pin_counts", "prebuild", "wait_for_plans", "plans_made",
    "tune",
]

# name -> the module that holds it, imported on first use (the jobs import torch only when
# they run; the measuring functions import it with their module)
_LAZY = {"explore": "jobs.explore", "sweep_model": "jobs.sweep", "capture": "jobs.sweep",
         "advise": "jobs.advise", "tune": "jobs.tune", "run_algorithm": "measure.pipeline",
         "reference": "measure.pipeline", "environment": "measure.environment",
         "info": "measure.pipeline", "pin": "pinning.modules", "unpin": "pinning.modules",
         "pinned": "pinning.modules", "pin_counts": "pinning.op",
         "prebuild": "pinning.prebuild", "wait_for_plans": "pinning.ahead",
         "plans_made": "pinning.op"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module 'cudnn_explorer' has no attribute {name!r}")
