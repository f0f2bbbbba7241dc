"""Layers shared by the model architectures."""

from keras_gen.layers.cached_attention import CachedAttention
from keras_gen.layers.dense import Dense
from keras_gen.layers.rms_normalization import RMSNormalization
from keras_gen.layers.rotary_embedding import RotaryEmbedding
