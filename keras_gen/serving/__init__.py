"""Serving: the continuous-batching `Engine` and an OpenAI-compatible HTTP
server over it (the server needs the `serve` extra: FastAPI, uvicorn).

Names load on first use, so that the engine imports without FastAPI.
"""

import importlib

_EXPORTS = {
    "APIError": "keras_gen.serving.api_error",
    "ChatTemplate": "keras_gen.tokenizers.chat_template",
    "CompletionRequest": "keras_gen.serving.completion_request",
    "Engine": "keras_gen.serving.engine",
    "EngineClosed": "keras_gen.serving.engine",
    "EngineFull": "keras_gen.serving.engine",
    "EngineMetrics": "keras_gen.serving.engine_metrics",
    "GenerationHandle": "keras_gen.serving.generation_handle",
    "RequestCancelled": "keras_gen.serving.generation_handle",
    "create_app": "keras_gen.serving.openai_app",
    "serve": "keras_gen.serving.openai_app",
}
__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'keras_gen.serving' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *__all__])
