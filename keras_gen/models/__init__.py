"""Models: the `CausalLM` task and the backbones it generates with."""

from keras_gen.models.backbone import Backbone
from keras_gen.models.causal_lm import CausalLM
from keras_gen.models.gpt2.gpt2_backbone import GPT2Backbone
from keras_gen.models.gpt2.gpt2_causal_lm import GPT2CausalLM
from keras_gen.models.llama.llama_backbone import LlamaBackbone
from keras_gen.models.llama.llama_causal_lm import LlamaCausalLM
