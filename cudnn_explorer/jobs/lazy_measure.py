"""The measuring layer, imported on first use (it imports torch): a missing torch or numpy
is one MissingDependencyError that names the fix (exit 3)."""
from __future__ import annotations

from ..core.errors import ExplorerError, MissingDependencyError

__all__ = ["measuring", "require_driver", "frontend_built", "info", "dump_device_profile"]


def require_driver() -> None:
    """MissingDependencyError at once (milliseconds, no torch imported, no process
    started) where the NVIDIA driver says this machine has no usable GPU
    (measure/driver.py); where it may have one, torch's own check follows later."""
    from ..measure.driver import no_gpu_reason

    reason = no_gpu_reason()
    if reason:
        raise MissingDependencyError(
            f"no usable CUDA GPU ({reason}); run where nvidia-smi lists a GPU")


def measuring():
    """measure.pipeline, or MissingDependencyError naming what to install."""
    try:
        from ..measure import pipeline
    except ImportError as e:
        raise MissingDependencyError(
            f"{e.name or 'a dependency'} is not installed: run scripts/setup.sh, or pip "
            f"install torch numpy tabulate in this environment") from None
    return pipeline


def frontend_built(device: int) -> bool:
    """Whether the extension has cudnn-frontend. True when the extension or the GPU is
    missing: then explore() reports that, as one line, before anything else."""
    measuring()
    from ..measure import native

    try:
        native.require_gpu(device)
        return native.frontend_available()
    except ExplorerError:
        return True


def info(device: int = 0) -> dict:
    """Build-time and running versions, and the GPUs (measure.pipeline.info)."""
    return measuring().info(device)


def dump_device_profile(device: int = 0) -> str:
    """This GPU's cuDNN device profile as JSON text, for ``--target``."""
    require_driver()
    measuring()
    from ..measure.deviceless import dump_profile

    return dump_profile(device).rstrip("\n") + "\n"
