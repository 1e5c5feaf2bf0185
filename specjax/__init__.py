"""specjax: speculative decoding research in JAX, centred on the verification rule."""

__version__ = "0.1.0"
