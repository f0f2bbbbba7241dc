from keras_gen.models.llama.llama_backbone import LlamaBackbone
from keras_gen.models.llama.llama_causal_lm import LlamaCausalLM
