"""Tokenizers: text to token ids and back, and chat templates."""

from keras_gen.tokenizers.chat_template import ChatTemplate
from keras_gen.tokenizers.tokenizer import Tokenizer
