"""Verifier comparison rows: evaluation (timing + quality) and the quality metrics."""
