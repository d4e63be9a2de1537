"""This process's GPU and libraries, described: the :class:`Environment` that results and
plan files are keyed by.

A module of its own so that ``pin()``'s environment check imports this and the extension
only, not the exploration pipeline (about 10-16 ms of a pinned process's start).
"""
from __future__ import annotations

import socket

from ..core.exploration import Environment
from . import native

__all__ = ["environment"]


def environment(device: int = 0) -> Environment:
    """Describe the GPU and the libraries in use (initialises CUDA on ``device``)."""
    torch = native.require_gpu(device)
    props = torch.cuda.get_device_properties(device)
    built, running = native.build_info(), native.runtime_info()
    return Environment(
        gpu_name=props.name, compute_capability=f"{props.major}.{props.minor}",
        device_index=device, sm_count=int(props.multi_processor_count),
        torch_version=torch.__version__,
        torch_cuda=str(torch.version.cuda), cudnn_torch=str(torch.backends.cudnn.version()),
        cudnn_runtime=running.get("cudnn", ""), cudnn_built=built.get("cudnn", ""),
        torch_built=built.get("torch", ""), cuda_runtime=running.get("cuda_runtime", ""),
        cuda_driver=running.get("cuda_driver", ""),
        cudnn_frontend=built.get("cudnn_frontend", ""), hostname=socket.gethostname(),
    )
