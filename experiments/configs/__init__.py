"""ml_collections configs for the experiment binaries."""
