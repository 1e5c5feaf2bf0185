"""The tables of docs/results.md and benchmarks/RESULTS.md and the papers' claims they are read against."""
