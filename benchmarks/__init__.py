"""The benchmark shelf: benchmarks/README.md says what each script answers and how to run it."""
