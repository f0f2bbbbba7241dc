from keras_gen.models.olmo2 import olmo2_checkpoint  # noqa: F401 (registers)
from keras_gen.models.olmo2.olmo2_backbone import Olmo2Backbone
from keras_gen.models.olmo2.olmo2_causal_lm import Olmo2CausalLM
