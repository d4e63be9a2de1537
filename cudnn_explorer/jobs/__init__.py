"""Jobs: what a command does, as functions that Python users call too. Each takes plain
arguments and records, runs the measuring and model layers, keeps what finished in the
results store and the files asked for, and returns records; none renders. The command
line (cli/) parses, calls a job, and renders what it returns.

``explore`` (one problem), ``sweep_model`` (every convolution of a model), ``advise``
(benchmark on or off for a workload), ``rank_sweep`` (one rank of a torchrun sweep),
``rank_targets`` (heuristic rankings for other GPUs). Messages that are not progress
(a note, a warning about the store) go to ``notify(kind, text)``; by default to the
``cudnn_explorer`` logger.
"""
