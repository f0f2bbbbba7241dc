from keras_gen.models.smollm3 import smollm3_checkpoint  # noqa: F401 (registers)
from keras_gen.models.smollm3.smollm3_backbone import SmolLM3Backbone
from keras_gen.models.smollm3.smollm3_causal_lm import SmolLM3CausalLM
