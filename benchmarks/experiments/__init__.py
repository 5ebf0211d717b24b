"""Benchmarks whose question is settled: each chose between options the code now ships one of.
Kept runnable (`python -m benchmarks.experiments.NAME`) to re-check a decision; the index and
what each decided: benchmarks/README.md."""
