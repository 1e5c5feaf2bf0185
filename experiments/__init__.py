"""absl experiment binaries (run as ``python -m experiments.<name>``)."""
