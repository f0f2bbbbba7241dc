"""keras-gen: fast, compiled text generation for Keras 3.

The public API loads on first use (PEP 562), so that `import keras_gen` does
not import Keras: the `keras-gen` command must set `KERAS_BACKEND` from its
`--backend` flag before Keras loads. When nothing chooses an installed
backend, importing keras_gen picks one (see `keras_gen.utils.backend_choice`).
"""

import importlib

from keras_gen.utils.backend_choice import choose_backend

choose_backend()

__version__ = "0.1.0"

_SUBMODULES = (
    "models",
    "samplers",
    "kernels",
    "generation",
    "tokenizers",
    "processors",
    "streaming",
    "training",
)
_EXPORTS = {
    "GenerationConfig": "keras_gen.generation.generation_config",
    "ChatSession": "keras_gen.generation.chat_session",
    "CausalLM": "keras_gen.models",
    "GPT2Backbone": "keras_gen.models",
    "GPT2CausalLM": "keras_gen.models",
    "LlamaBackbone": "keras_gen.models",
    "LlamaCausalLM": "keras_gen.models",
    "GemmaCausalLM": "keras_gen.models",
    "MixtralCausalLM": "keras_gen.models",
    "Olmo2CausalLM": "keras_gen.models",
    "Phi3CausalLM": "keras_gen.models",
    "Qwen3CausalLM": "keras_gen.models",
    "SmolLM3CausalLM": "keras_gen.models",
    "Tokenizer": "keras_gen.tokenizers",
    "CausalLMPreprocessor": "keras_gen.training",
    "GenerationOutput": "keras_gen.streaming",
    "Engine": "keras_gen.serving",
}
__all__ = [*_SUBMODULES, *_EXPORTS]


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_gen.{name}")
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'keras_gen' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
