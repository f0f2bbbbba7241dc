from keras_gen.models.gpt2 import gpt2_checkpoint  # noqa: F401 (registers)
from keras_gen.models.gpt2.gpt2_backbone import GPT2Backbone
from keras_gen.models.gpt2.gpt2_causal_lm import GPT2CausalLM
