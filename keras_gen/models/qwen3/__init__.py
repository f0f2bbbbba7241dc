from keras_gen.models.qwen3 import qwen3_checkpoint  # noqa: F401 (registers)
from keras_gen.models.qwen3.qwen3_backbone import Qwen3Backbone
from keras_gen.models.qwen3.qwen3_causal_lm import Qwen3CausalLM
