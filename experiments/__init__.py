"""Experiments: a library plus thin absl binaries.

The top-level modules are the binaries (``python -m experiments.<name>``); the
subpackages are the library they share: :mod:`experiments.common`,
:mod:`experiments.compare`, :mod:`experiments.propositions`,
:mod:`experiments.humaneval`, :mod:`experiments.sv`, :mod:`experiments.results`.
"""
