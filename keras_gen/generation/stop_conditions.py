"""Host-side preparation of stop sequences and stop strings.

The compiled loop matches them (see `keras_gen.samplers.stopping`); here they
are checked, packed into fixed-shape tensors, and the outputs are cut after
the first match.
"""

from keras import ops

from keras_gen.generation.generation_config import MAX_STOP_STRING_LENGTH
from keras_gen.generation.generation_config import MAX_STOP_STRINGS
from keras_gen.kernels import stopping
from keras_gen.utils import checks
from keras_gen.utils.lru_cache import LRUCache

# Token texts per tokenizer (decoding a whole vocabulary takes a moment),
# and the stop string tables of recent sets of strings.
_PIECES = LRUCache(4)
_TABLES = LRUCache(16)


def _cached(cache, key, tokenizer, make):
    """`make()`, kept under `key` for a tokenizer with a fingerprint."""
    fingerprint = getattr(tokenizer, "fingerprint", None)
    if fingerprint is None:
        return make()
    return cache.get((fingerprint,) + key, make)


def token_pieces(tokenizer, vocabulary_size):
    """The text of each token id, decoded one token at a time.

    Only `tokenizer.decode` is used. A token whose text is not valid on its
    own (part of a multi-byte character) decodes to a replacement character
    and cannot take part in a stop string match.
    """
    return _cached(
        _PIECES,
        (vocabulary_size,),
        tokenizer,
        lambda: [tokenizer.decode([i]) for i in range(vocabulary_size)],
    )


def _check_sequences(stop_sequences, vocabulary_size):
    """The option's own check (`GenerationConfig` runs it too), and the
    model's vocabulary."""
    empty = isinstance(stop_sequences, (list, tuple)) and not stop_sequences
    if stop_sequences is None or empty:
        return []
    sequences = checks.check_token_sequences("stop_sequences", stop_sequences)
    outside = sorted(
        {t for sequence in sequences for t in sequence if t >= vocabulary_size}
    )
    if outside:
        raise ValueError(
            f"`stop_sequences` must hold token ids in [0, {vocabulary_size}). "
            f"Received ids outside it: {outside[:20]}"
        )
    return sequences


class StopConditions:
    """The stop sequences and stop strings of one `generate` call."""

    def __init__(self, stop_sequences, stop_strings, tokenizer, vocabulary_size):
        self.sequences = _check_sequences(stop_sequences, vocabulary_size)
        self.strings = checks.check_strings(
            "stop_strings",
            [] if stop_strings is None else stop_strings,
            MAX_STOP_STRINGS,
            MAX_STOP_STRING_LENGTH,
        )
        self.pieces = None
        if self.strings:
            if tokenizer is None:
                raise ValueError(
                    "`stop_strings` need a tokenizer, and this model has none. "
                    "Use `stop_sequences` with token ids instead."
                )
            self.pieces = token_pieces(tokenizer, vocabulary_size)
        self.tokenizer = tokenizer
        self.vocabulary_size = vocabulary_size

    def program_inputs(self):
        """`{"stop_sequences": tensors}`, always present (maybe empty)."""
        stop = stopping.sequence_tensors(self.sequences)
        if self.strings:
            stop.update(
                _cached(
                    _TABLES,
                    (self.vocabulary_size, tuple(self.strings)),
                    self.tokenizer,
                    lambda: stopping.string_tables(self.pieces, self.strings),
                )
            )
        return {
            "stop_sequences": {
                name: ops.convert_to_tensor(value) for name, value in stop.items()
            }
        }

    def _string_end(self, row, position):
        """Whether the text up to `row[position]` ends with a stop string."""
        text = "".join(self.pieces[t] for t in row[: position + 1])
        last_start = len(text) - len(self.pieces[row[position]])
        return any(
            text.find(s, max(0, last_start - len(s) + 1)) >= 0 for s in self.strings
        )

    def ends_at(self, row, position):
        """Whether a stop sequence or string ends at `row[position]`.

        The loop matched the same on the device; the host repeats it to
        know where the row ended and why.
        """
        if any(list(row[: position + 1][-len(s) :]) == s for s in self.sequences):
            return True
        return bool(self.strings) and self._string_end(row, position)

    def visible_text(self, text, finished):
        """The part of a row's new `text` that may be shown.

        Text is cut where a stop string begins. While the row runs, a tail
        that could still grow into a stop string is held back, so streamed
        text never shows a stop string that the final text hides.
        """
        if not self.strings:
            return text
        starts = [text.find(s) for s in self.strings]
        starts = [start for start in starts if start >= 0]
        if starts:
            return text[: min(starts)]
        if finished:
            return text
        held = max(
            (n for s in self.strings for n in range(1, len(s)) if text.endswith(s[:n])),
            default=0,
        )
        return text[: len(text) - held]
