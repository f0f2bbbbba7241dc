"""Additive logit biases for tokens and token sequences."""

import numpy as np

from keras_gen.processors.bad_words import sequence_bias
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import check_token_ids
from keras_gen.processors.logits_processor import pad_sequences


class LogitBias(LogitsProcessor):
    """Adds a fixed bias to chosen tokens' logits (OpenAI's `logit_bias`).

    A key may also be a tuple of token ids: its bias goes to the last token
    when the sequence so far ends with the others, as transformers'
    `SequenceBiasLogitsProcessor`. Biases and ids reach the program as
    padded tensors: new values of similar size do not recompile.

    Args:
        bias: dict from a token id (or a tuple of ids) to a float bias;
            `-inf` bans, a large positive value forces.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> processor = LogitBias({1: 2.0, 3: -1.0})
    >>> prompt, mask = np.array([[0]], "int32"), np.ones((1, 1), bool)
    >>> logits = np.zeros((1, 4), "float32")
    >>> np.asarray(processor(logits, prompt, 1, mask)).tolist()
    [[0.0, 2.0, 0.0, -1.0]]
    """

    tunable_config = ("bias",)

    def __init__(self, bias):
        if not isinstance(bias, dict) or not bias:
            raise ValueError(
                f"`bias` must be a non-empty dict {{token_id: bias}}. Received: {bias!r}"
            )
        self.bias = {}
        for key, value in bias.items():
            key = tuple(check_token_ids("bias", key))
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError(f"Biases must be numbers. Received: {value!r}")
            self.bias[key[0] if len(key) == 1 else key] = float(value)
        keys = [k if isinstance(k, tuple) else (k,) for k in self.bias]
        self.sequences, self.lengths = pad_sequences(keys)
        self.biases = np.zeros(len(self.lengths), "float32")
        self.biases[: len(keys)] = list(self.bias.values())

    def get_parameters(self):
        return {
            "sequences": self.sequences,
            "lengths": self.lengths,
            "biases": self.biases,
        }

    def get_token_ids(self):
        return [t for k in self.bias for t in (k if isinstance(k, tuple) else (k,))]

    def __call__(self, logits, prompt, index, mask):
        return sequence_bias(
            logits, prompt, index, self.sequences, self.lengths, self.biases
        )

    def get_config(self):
        return {"bias": dict(self.bias)}
