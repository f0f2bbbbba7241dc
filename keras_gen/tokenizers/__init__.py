"""Tokenizers: text to token ids and back."""

from keras_gen.tokenizers.tokenizer import Tokenizer
