"""The command line: ``python -m cudnn_explorer --shape 32,3,224,224 --kernel 3``.

``main`` (cli/main.py) finds the verb and imports only its module; each verb's module
(explore, model, advise, compare, history, export, plot, and targets behind ``--target``)
holds its parser, its table of conflicting flags, and a short ``run`` that calls a job
(cudnn_explorer/jobs/) and a renderer (cudnn_explorer/report/).
"""
from .main import console, main

__all__ = ["main", "console"]
