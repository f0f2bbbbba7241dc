"""keras-gen: fast, compiled text generation for Keras 3."""

from keras_gen import models
from keras_gen import processors
from keras_gen import samplers
from keras_gen import streaming
from keras_gen import tokenizers
from keras_gen.models import CausalLM
from keras_gen.models import GPT2Backbone
from keras_gen.models import GPT2CausalLM
from keras_gen.models import LlamaBackbone
from keras_gen.models import LlamaCausalLM
from keras_gen.streaming import GenerationOutput
from keras_gen.tokenizers import Tokenizer

__version__ = "0.1.0"
