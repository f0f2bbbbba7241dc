"""Layers shared by the model architectures."""

from keras_gen.layers.cached_attention import CachedAttention
