"""The pure core: problems, options, result records, analysis and log parsers.

Nothing here imports torch, the native extension or anything under ``measure/``:
every rule is testable on a machine without a GPU.
"""
