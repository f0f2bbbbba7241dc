"""Logits processors: penalties, bans, biases and filters run in the loop."""

from keras_gen.processors.bad_words import BadWords
from keras_gen.processors.choice import Choice
from keras_gen.processors.forced_eos import ForcedEOS
from keras_gen.processors.frequency_penalty import FrequencyPenalty
from keras_gen.processors.json_object import JsonObject
from keras_gen.processors.json_schema import JsonSchema
from keras_gen.processors.logit_bias import LogitBias
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.min_length import MinLength
from keras_gen.processors.min_p import MinP
from keras_gen.processors.no_repeat_ngram import NoRepeatNGram
from keras_gen.processors.presence_penalty import PresencePenalty
from keras_gen.processors.regex import Regex
from keras_gen.processors.registry import get
from keras_gen.processors.registry import get_list
from keras_gen.processors.registry import register
from keras_gen.processors.registry import serialize
from keras_gen.processors.registry import structure
from keras_gen.processors.repetition_penalty import RepetitionPenalty
from keras_gen.processors.response_format import from_response_format
from keras_gen.processors.structured_output import StructuredOutput
from keras_gen.processors.suppress_tokens import SuppressTokens
from keras_gen.processors.top_k import TopK
from keras_gen.processors.top_p import TopP
from keras_gen.processors.triggered import Triggered
from keras_gen.processors.typical import Typical
