"""Models: the `CausalLM` task and the backbones it generates with.

Importing a family folder registers the Hugging Face architectures it
reads (`keras_gen.models.architectures`).
"""

from keras_gen.models.backbone import Backbone
from keras_gen.models.causal_lm import CausalLM
from keras_gen.models.decoder_backbone import DecoderBackbone
from keras_gen.models.gemma import GemmaBackbone
from keras_gen.models.gemma import GemmaCausalLM
from keras_gen.models.gpt2 import GPT2Backbone
from keras_gen.models.gpt2 import GPT2CausalLM
from keras_gen.models.llama import LlamaBackbone
from keras_gen.models.llama import LlamaCausalLM
from keras_gen.models.mixtral import MixtralBackbone
from keras_gen.models.mixtral import MixtralCausalLM
from keras_gen.models.olmo2 import Olmo2Backbone
from keras_gen.models.olmo2 import Olmo2CausalLM
from keras_gen.models.phi3 import Phi3Backbone
from keras_gen.models.phi3 import Phi3CausalLM
from keras_gen.models.qwen3 import Qwen3Backbone
from keras_gen.models.qwen3 import Qwen3CausalLM
from keras_gen.models.smollm3 import SmolLM3Backbone
from keras_gen.models.smollm3 import SmolLM3CausalLM
