"""specjax packaging. Core: JAX stack; extras: test, peer (torch + transformers), notebooks."""

from setuptools import find_packages, setup

CORE = [
    "jax>=0.6",
    "flax>=0.10",
    "optax>=0.2",
    "orbax-checkpoint>=0.11",
    "numpy>=1.26",
    "chex>=0.1.90",
    "absl-py>=2.0",
    "tokenizers>=0.20",
    "safetensors>=0.4",
    "ml_collections>=0.1",
    "tqdm>=4.60",
    "matplotlib>=3.8",
    "gguf>=0.10",
    "jinja2>=3.1.6",
]
PEER = ["torch==2.13.0", "transformers>=4.51", "accelerate>=1.0"]
TEST = ["pytest>=8", "pytest-timeout>=2.3", "pytest-xdist>=3.5", "scipy>=1.11"]
NOTEBOOKS = ["nbclient>=0.10", "nbformat>=5.10", "ipykernel>=6.29"]

setup(
    name="specjax",
    version="0.1.0",
    description="Speculative decoding research in JAX, centred on the verification rule",
    long_description=open("README.md").read(),
    long_description_content_type="text/markdown",
    python_requires=">=3.10",
    packages=find_packages(include=["specjax", "specjax.*", "experiments", "experiments.*"]),
    package_data={"specjax.models": ["assets/*/*", "assets/*/*/*", "assets/*.md"]},
    include_package_data=True,
    install_requires=CORE,
    extras_require={"test": TEST + NOTEBOOKS, "peer": PEER, "notebooks": NOTEBOOKS},
    entry_points={"console_scripts": ["specjax-bench=experiments.benchmark:_console"]},
)
