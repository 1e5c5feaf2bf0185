"""Library of the experiment binaries: what more than one binary needs (flags parsing,
the resumable sweep, comparison rows, model sets, prompts, run contexts, reports)."""
