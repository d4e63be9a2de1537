"""cudnn_explorer: what cuDNN does with a convolution, what PyTorch picks, what it costs.

``import cudnn_explorer`` is lean: it loads neither torch, the native extension nor
CUDA. GPU functions (:func:`explore`, :func:`run_algorithm`, :func:`reference`,
:func:`environment`, :func:`info`) import them on first call and raise one clear
error (MissingDependencyError) when something is missing.

Layers: ``core/`` (pure: problem, options, records, captures and sweeps, analysis, log
parsers), ``measure/`` (the GPU: native gate, legacy Find and re-timing, engine configs,
PyTorch's children, the pipeline), ``model/`` (a whole model: capture, zoo, sweep),
``report/`` (tables and CSV), ``cli.py``. Each imports only the layers before it.
"""
from .core.errors import (ChildError, CudnnError, ExplorerError, GpuError,
                          MissingDependencyError, ResourceError, UserError)
from .core.options import ExploreOptions
from .core.problem import DIRECTIONS, ConvProblem
from .core.exploration import SCHEMA_NAME, SCHEMA_VERSION, Environment, Exploration
from .core.records import AlgoResult, DirectionResult, WorkspaceEntry

from .core.version import __version__

__all__ = [
    "__version__", "ConvProblem", "DIRECTIONS", "ExploreOptions", "explore", "run_algorithm",
    "reference",
    "environment", "info", "Exploration", "DirectionResult", "AlgoResult", "WorkspaceEntry",
    "Environment", "SCHEMA_NAME", "SCHEMA_VERSION", "ExplorerError", "UserError",
    "MissingDependencyError", "CudnnError", "ResourceError", "GpuError", "ChildError",
]

_LAZY = {"explore", "run_algorithm", "reference", "environment", "info"}


def __getattr__(name):
    if name in _LAZY:
        from .measure import pipeline  # lazily: it imports torch on first GPU call

        return getattr(pipeline, name)
    raise AttributeError(f"module 'cudnn_explorer' has no attribute {name!r}")
