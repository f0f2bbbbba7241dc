from keras_gen.models.mixtral import mixtral_checkpoint  # noqa: F401 (registers)
from keras_gen.models.mixtral.mixtral_backbone import MixtralBackbone
from keras_gen.models.mixtral.mixtral_causal_lm import MixtralCausalLM
