"""Speculative Verification: calibration and the paper-style evaluation."""
