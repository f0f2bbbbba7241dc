from keras_gen.models.gemma import gemma_checkpoint  # noqa: F401 (registers)
from keras_gen.models.gemma.gemma_backbone import GemmaBackbone
from keras_gen.models.gemma.gemma_causal_lm import GemmaCausalLM
