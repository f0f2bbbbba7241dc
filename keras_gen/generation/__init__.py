"""Between the models and serving: the generation options
(`GenerationConfig`, and their mapping to a sampler and processors), one
call's prompts, stop conditions and outputs (`GenerationRequest`).

Nothing here imports Keras at import time: the `keras-gen` command reads
options before it chooses the backend.
"""
