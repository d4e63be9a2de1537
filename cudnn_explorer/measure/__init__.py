"""Measurement on the GPU: the native gate, legacy Find and re-timing, engine configs,
PyTorch's own choice in child processes, and the pipeline that builds the records.

Imports ``core/`` only; never ``report/`` or the CLI. torch is imported lazily inside
the functions that need a GPU, so that importing the package stays lean.
"""
