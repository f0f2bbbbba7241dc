"""Stop sequences and stop strings, matched inside the compiled loop."""

import pytest

from keras_gen.generation import stop_conditions


class CharTokenizer:
    """A fake tokenizer: ids spell letters, plus multi-letter tokens."""

    def __init__(self, vocabulary_size):
        self.pieces = [chr(ord("a") + i % 26) for i in range(vocabulary_size)]
        # Multi-character tokens, so a string has several splits.
        self.pieces[40:44] = ["ab", "bc", "abc", "cxyz"]

    def encode(self, text):
        return [self.pieces.index(c) for c in text]

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)

    @property
    def vocabulary(self):
        return {p: i for i, p in enumerate(self.pieces)}


def test_stop_sequence_cuts_rows(gpt2_lm):
    plain = gpt2_lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=8, stop_token_ids=None)
    stop = plain[0][5:7]
    out = gpt2_lm.generate(
        [[1, 2, 3], [4, 5]],
        max_new_tokens=8,
        stop_token_ids=None,
        stop_sequences=[stop],
    )
    assert out[0] == plain[0][:7]
    assert out[1] == plain[1][: _first_end(plain[1], 2, stop)]


def _first_end(row, start, sequence):
    for end in range(start + 1, len(row) + 1):
        if row[:end][-len(sequence) :] == sequence:
            return end
    return len(row)


def test_changing_stop_sequences_does_not_retrace(gpt2_lm, traces):
    gpt2_lm.generate([1, 2, 3], max_new_tokens=6, stop_sequences=[[1, 2]])
    first = traces()
    gpt2_lm.generate([1, 2, 3], max_new_tokens=6, stop_sequences=[[5, 6, 7], [9]])
    gpt2_lm.generate([1, 2, 3], max_new_tokens=6)
    assert traces() == first


@pytest.mark.parametrize("split", [[0, 1, 2], [40, 2], [0, 41], [42], [40, 43]])
def test_stop_string_matches_every_split(split):
    tokenizer = CharTokenizer(64)
    pieces = stop_conditions.token_pieces(tokenizer, 64)
    condition = stop_conditions.StopConditions(None, ["abc"], tokenizer, 64)
    row = [25, 25] + split + [25, 25]
    ends = [condition.ends_at(row, i) for i in range(len(row))]
    assert ends.index(True) == 1 + len(split)
    # The compiled matcher agrees at every position.
    import numpy as np
    from keras import ops

    from keras_gen.kernels import stopping

    tables = {
        k: ops.convert_to_tensor(v)
        for k, v in stopping.string_tables(pieces, ["abc"]).items()
    }
    token_ids = ops.convert_to_tensor(np.asarray([row], "int32"))
    hits = [
        bool(
            ops.convert_to_numpy(
                stopping.string_match(
                    token_ids, ops.convert_to_tensor(i, "int32"), tables
                )
            )[0]
        )
        for i in range(len(row))
    ]
    assert hits.index(True) == 1 + len(split)


def test_stop_strings_in_generate(gpt2_lm):
    tokenizer = CharTokenizer(64)
    gpt2_lm.tokenizer = tokenizer
    plain = gpt2_lm.generate("abc", max_new_tokens=8, stop_token_ids=None)
    stop = plain[5:7]
    out = gpt2_lm.generate(
        "abc", max_new_tokens=8, stop_token_ids=None, stop_strings=[stop]
    )
    assert out == plain[: plain.index(stop, 3)]
    kept = gpt2_lm.generate(
        "abc",
        max_new_tokens=8,
        stop_token_ids=None,
        stop_strings=[stop],
        include_stop_string=True,
    )
    assert kept == plain[: plain.index(stop, 3) + len(stop)]


def test_streamed_text_never_shows_a_stop_string(gpt2_lm):
    gpt2_lm.tokenizer = CharTokenizer(64)
    plain = gpt2_lm.generate("abc", max_new_tokens=12, stop_token_ids=None)
    stop = plain[6:8]
    kwargs = dict(max_new_tokens=12, stop_token_ids=None, stop_strings=[stop])
    chunks = list(gpt2_lm.stream("abc", stream_chunk_size=1, **kwargs))
    shown = "".join(chunk.text[0] for chunk in chunks)
    assert stop not in shown
    assert shown == gpt2_lm.generate("abc", strip_prompt=True, **kwargs)
    assert chunks[-1].finish_reasons == ["stop"]


def test_stop_string_errors(gpt2_lm):
    with pytest.raises(ValueError, match="tokenizer"):
        gpt2_lm.generate([1, 2], max_new_tokens=2, stop_strings=["x"])
    with pytest.raises(ValueError, match="stop_sequences"):
        gpt2_lm.generate([1, 2], max_new_tokens=2, stop_sequences=[[999]])
