from keras_gen.models.phi3 import phi3_checkpoint  # noqa: F401 (registers)
from keras_gen.models.phi3.phi3_backbone import Phi3Backbone
from keras_gen.models.phi3.phi3_causal_lm import Phi3CausalLM
