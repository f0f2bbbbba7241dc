"""Banned words: single tokens and multi-token sequences."""

from keras import ops

from keras_gen.kernels.stopping import suffix_match
from keras_gen.processors.logits_processor import NEG_INF
from keras_gen.processors.logits_processor import LogitsProcessor
from keras_gen.processors.logits_processor import count_tokens
from keras_gen.processors.logits_processor import pad_sequences
from keras_gen.utils.checks import check_token_sequences


def sequence_bias(logits, prompt, index, sequences, lengths, biases):
    """Add `biases[s]` to the last token of each sequence `s` whose other
    tokens end the row. `(slots, width)` sequences, `(slots,)` lengths and
    biases for every row, or per row `(rows, slots, width)` and
    `(rows, slots)`; slots of length 0 are padding."""
    sequences = ops.cast(sequences, "int32")
    if len(ops.shape(sequences)) == 2:
        sequences, lengths, biases = sequences[None], lengths[None], biases[None]
    lengths = ops.cast(lengths, "int32")  # (rows or 1, slots)
    prefix_lengths = ops.maximum(lengths - 1, 0)
    match = suffix_match(prompt, index - 1, sequences, prefix_lengths)
    match = ops.logical_and(match, lengths > 0)
    last = ops.take_along_axis(sequences, prefix_lengths[..., None], axis=-1)[..., 0]
    last = ops.broadcast_to(last, ops.shape(match))
    # `where` before the sum: 0 * -inf would be NaN.
    weights = ops.where(match, ops.cast(biases, "float32"), 0.0)
    return logits + count_tokens(last, weights, ops.shape(logits)[-1])


class BadWords(LogitsProcessor):
    """Bans token sequences: their last token, when the rest ends the row.

    As transformers' `NoBadWordsLogitsProcessor`: a one-token sequence is
    always banned; a longer one bans its last token whenever the sequence so
    far (prompt included) ends with its other tokens. The sequences reach
    the program as a padded tensor, so a new list of similar size does not
    recompile.

    Args:
        token_id_sequences: list of lists of token ids.

    Call arguments:
        See `LogitsProcessor`.

    Examples:
    >>> import numpy as np
    >>> processor = BadWords([[3], [1, 2]])
    >>> prompt, mask = np.array([[0, 1]], "int32"), np.ones((1, 2), bool)
    >>> logits = np.zeros((1, 4), "float32")
    >>> np.asarray(processor(logits, prompt, 2, mask)).tolist()
    [[0.0, 0.0, -inf, -inf]]
    """

    tunable_config = ("token_id_sequences",)
    # Its id lists are padded with -1 (and lengths or biases with 0).
    resizable = True

    def __init__(self, token_id_sequences):
        self.token_id_sequences = check_token_sequences(
            "token_id_sequences", token_id_sequences
        )
        self.sequences, self.lengths = pad_sequences(self.token_id_sequences)

    def get_parameters(self):
        return {"sequences": self.sequences, "lengths": self.lengths}

    def get_token_ids(self):
        return [t for sequence in self.token_id_sequences for t in sequence]

    def __call__(self, logits, prompt, index, mask):
        biases = ops.where(ops.cast(self.lengths, "int32") > 0, NEG_INF, 0.0)
        return sequence_bias(
            logits, prompt, index, self.sequences, self.lengths, biases
        )

    def get_config(self):
        return {"token_id_sequences": self.token_id_sequences}
