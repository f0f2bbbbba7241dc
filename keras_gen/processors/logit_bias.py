"""Additive logit biases for tokens and token sequences."""

import numpy as np

from keras_gen.processors.bad_words import sequence_bias
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import pad_sequences
from keras_gen.utils.checks import MAX_ID_SEQUENCE_LENGTH
from keras_gen.utils.checks import check_number
from keras_gen.utils.checks import check_token_ids

# The largest finite bias (see `LogitBias`).
MAX_BIAS = 1e9


def _read_key(text):
    """`"50256"` -> 50256 and `"1,2"` -> (1, 2): keys as JSON writes them."""
    parts = text.split(",")
    if not all(part.strip().isdigit() for part in parts):
        raise ValueError(f"`bias` keys must be token ids. Received: {text!r}")
    ids = tuple(int(part) for part in parts)
    return ids[0] if len(ids) == 1 else ids


class LogitBias(LogitsProcessor):
    """Adds a fixed bias to chosen tokens' logits (OpenAI's `logit_bias`).

    A key may also be a tuple of token ids: its bias goes to the last token
    when the sequence so far ends with the others, as transformers'
    `SequenceBiasLogitsProcessor`. Biases and ids reach the program as
    padded tensors: new values of similar size do not recompile.

    Args:
        bias: dict from a token id (or a tuple of ids) to a bias: a finite
            float in [-1e9, 1e9] (real logits are within a few hundred, so
            this is enough to force or ban a token, and stays finite through
            any temperature and penalty), or `-inf`, which bans. `+inf` is
            refused: forced tokens need no infinity, and one would turn
            log-probabilities into NaN. String keys as JSON writes them
            (`"50256"`, `"1,2"`) are read as ids.

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
    # Its id lists are padded with -1 (and lengths or biases with 0).
    resizable = True

    def __init__(self, bias):
        if not isinstance(bias, dict) or not bias:
            raise ValueError(
                f"`bias` must be a non-empty dict {{token_id: bias}}. Received: {bias!r}"
            )
        self.bias = {}
        for key, value in bias.items():
            if isinstance(key, str):
                key = _read_key(key)
            key = tuple(check_token_ids("bias", key))
            if len(key) > MAX_ID_SEQUENCE_LENGTH:
                raise ValueError(
                    f"`bias` keys may be sequences of at most "
                    f"{MAX_ID_SEQUENCE_LENGTH} token ids. Received one of {len(key)}."
                )
            value = check_number(
                f"bias[{key[0] if len(key) == 1 else key}]",
                value,
                -MAX_BIAS,
                MAX_BIAS,
                allow_inf=(NEG_INF,),
            )
            self.bias[key[0] if len(key) == 1 else key] = value
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
