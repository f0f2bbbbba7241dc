from keras_gen.models.llama import llama_checkpoint  # noqa: F401 (registers)
from keras_gen.models.llama.llama_backbone import LlamaBackbone
from keras_gen.models.llama.llama_causal_lm import LlamaCausalLM
