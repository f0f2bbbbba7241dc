"""Layers shared by the model architectures."""

from keras_gen.layers.cached_attention import CachedAttention
from keras_gen.layers.dense import Dense
from keras_gen.layers.dropout import Dropout
from keras_gen.layers.embedding import Embedding
from keras_gen.layers.layer_normalization import LayerNormalization
from keras_gen.layers.lean_call import LeanCall
from keras_gen.layers.rms_normalization import RMSNormalization
from keras_gen.layers.rotary_embedding import RotaryEmbedding
