"""Rendering: text tables and CSV from result records. Pure Python (tabulate, no torch):
every table can be rebuilt from a saved JSON file on a machine without a GPU."""
