"""The lossy-verification propositions: the sweep, its reports and the exact first-step law."""
