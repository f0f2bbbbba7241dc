"""Package metadata for keras-gen."""

import pathlib

from setuptools import find_packages
from setuptools import setup

HERE = pathlib.Path(__file__).parent

JAX = ["jax>=0.4.30", "jaxlib>=0.4.30"]
TENSORFLOW = ["tensorflow-cpu>=2.16"]
# The CPU wheel of torch 2.13.0 is what the test setup installs first; a range
# keeps any compatible torch the user already has.
TORCH = ["torch>=2.4"]
SERVE = ["fastapi>=0.110", "uvicorn>=0.29"]
# SentencePiece `tokenizer.model` files (folders without a tokenizer.json):
# the package's own protobuf schema reads them exactly.
SENTENCEPIECE = ["sentencepiece>=0.1.99", "protobuf"]
# The bundled demo model: weights, tokenizer and training record.
PRESET_FILES = ["presets/*/*.json", "presets/*/*.safetensors"]
# The server's chat page (`GET /`).
STATIC_FILES = ["serving/static/*.html"]

setup(
    name="keras-gen",
    version="0.1.0",
    description="Fast, compiled text generation for Keras 3 on JAX, TensorFlow and PyTorch.",
    long_description=(HERE / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_gen", "keras_gen.*"]),
    include_package_data=True,
    package_data={"keras_gen": PRESET_FILES + STATIC_FILES},
    install_requires=[
        "keras>=3.8",
        "numpy",
        "tokenizers",
        "safetensors",
        # Chat templates: prompts for the server, conversations for `fit`.
        "jinja2>=3.1",
        # The serving engine's metrics (`keras_gen.serving.Engine`).
        "prometheus-client>=0.17",
        # Structured output: regex and JSON schema automata over tokens.
        "outlines-core>=0.2.10,<0.3",
        # Progress bars (loading weights), as transformers shows them.
        "tqdm>=4.60",
    ],
    extras_require={
        "jax": JAX,
        "tensorflow": TENSORFLOW,
        "torch": TORCH,
        "serve": SERVE,
        "sentencepiece": SENTENCEPIECE,
        "test": [
            "pytest",
            # tools/run_tests.sh runs each backend's pass on two processes.
            "pytest-xdist",
            *SERVE,
            "httpx",
            *JAX,
            *TENSORFLOW,
            *TORCH,
            "keras-hub",
            "transformers",
            *SENTENCEPIECE,
            # Structured output tests validate what they generate.
            "jsonschema",
            # LoRA adapters are checked against PEFT's own loading.
            "peft",
            # A CPU peer of tools/benchmark.py (its smoke test runs it).
            "ctranslate2",
            # Lint and format (tools/run_tests.sh runs it first).
            "ruff",
            # The server is checked with OpenAI's own client.
            "openai",
        ],
    },
    entry_points={"console_scripts": ["keras-gen=keras_gen.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
