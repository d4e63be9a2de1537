"""The benchmark suite: one module per question, one harness (harness.py), one table
renderer (render.py). Run from the repository root as ``python -m benchmarks.NAME``;
each writes one JSON result that ``python -m benchmarks.render RESULT.json`` turns into
the table docs/benchmarks.md shows. The product never imports this package."""
