import pytest

from keras_gen.streaming import IncrementalDetokenizer
from tests.streaming.fake_tokenizer import TEXT
from tests.streaming.fake_tokenizer import ByteTokenizer


@pytest.mark.parametrize("piece", [1, 2, 3, 5])
def test_never_emits_half_a_character_and_joins_to_the_whole(piece):
    tokenizer = ByteTokenizer()
    tokens = tokenizer.encode(TEXT)
    detokenizer = IncrementalDetokenizer(tokenizer)
    segments = [
        detokenizer.add_tokens(tokens[i : i + piece])
        for i in range(0, len(tokens), piece)
    ]
    segments.append(detokenizer.finalize())
    assert not any("\ufffd" in segment for segment in segments)
    assert "".join(segments) == TEXT == tokenizer.decode(tokens)
    assert detokenizer.last_segment == segments[-1]


def test_an_unfinished_character_is_flushed_by_finalize():
    tokenizer = ByteTokenizer()
    tokens = tokenizer.encode("ok😀")[:-1]  # the emoji cut short
    detokenizer = IncrementalDetokenizer(tokenizer)
    assert [detokenizer.add_tokens([t]) for t in tokens] == ["o", "k", "", "", ""]
    assert detokenizer.finalize() == tokenizer.decode(tokens)[2:] == "\ufffd"


def test_byte_level_bpe_spaces(tmp_path):
    tokenizers = pytest.importorskip("tokenizers")
    from tokenizers import decoders
    from tokenizers import models
    from tokenizers import pre_tokenizers
    from tokenizers import trainers

    tokenizer = tokenizers.Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tokenizer.train_from_iterator([TEXT * 3, "hello world, the world"], trainer)
    text = "hello wörld 😀, the world ça"
    tokens = tokenizer.encode(text).ids
    detokenizer = IncrementalDetokenizer(tokenizer)
    joined = "".join(detokenizer.add_tokens([t]) for t in tokens)
    joined += detokenizer.finalize()
    assert joined == tokenizer.decode(tokens) == text


def test_bytes_that_are_not_utf8_lose_no_text():
    # A random model's bytes: the first completes the prompt's last
    # character, then lead bytes without their continuations (each a
    # `\ufffd`, merging differently as more bytes arrive).
    tokenizer = ByteTokenizer()
    prompt = [*tokenizer.encode("ab"), 0xDD]
    tokens = [0xB0, 0xE2, 0xE2, ord("$"), 0xE2, 0xE2, 0x0E, ord("t"), 0x82, 0xF0]
    joined = set()
    for piece in range(1, len(tokens) + 1):
        detokenizer = IncrementalDetokenizer(tokenizer, prompt=prompt)
        segments = [
            detokenizer.add_tokens(tokens[i : i + piece])
            for i in range(0, len(tokens), piece)
        ]
        joined.add("".join(segments) + detokenizer.finalize())
    # The same text however the tokens arrive: all but the character the
    # prompt began.
    assert joined == {tokenizer.decode(tokens[1:])}
