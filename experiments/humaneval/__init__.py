"""The HumanEval evaluation: decoding methods and the summary of a run's records."""
