"""The store layer: measured results kept in SQLite, answered again without measuring.
Imports core/ only."""
