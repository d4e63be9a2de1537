"""cudnn_explorer: what cuDNN does with a convolution, what PyTorch picks, what it costs.

``import cudnn_explorer`` is lean: it loads neither torch, the native extension nor
CUDA. GPU functions (:func:`explore`, :func:`run_algorithm`, :func:`reference`,
:func:`environment`, :func:`info`) import them on first call and raise one clear
error (errors.MissingDependencyError) when something is missing.
"""
from .errors import (CudnnError, ExplorerError, MissingDependencyError, ResourceError,
                     UserError)
from .problem import DIRECTIONS, ConvProblem
from .records import (SCHEMA_NAME, SCHEMA_VERSION, AlgoResult, DirectionResult, Environment,
                      Exploration, WorkspaceEntry)

__version__ = "0.1.0"

__all__ = [
    "__version__", "ConvProblem", "DIRECTIONS", "explore", "run_algorithm", "reference",
    "environment", "info", "Exploration", "DirectionResult", "AlgoResult", "WorkspaceEntry",
    "Environment", "SCHEMA_NAME", "SCHEMA_VERSION", "ExplorerError", "UserError",
    "MissingDependencyError", "CudnnError", "ResourceError",
]

_LAZY = {"explore", "run_algorithm", "reference", "environment", "info"}


def __getattr__(name):
    if name in _LAZY:
        from . import gpu as _gpu

        return getattr(_gpu, name)
    raise AttributeError(f"module 'cudnn_explorer' has no attribute {name!r}")
