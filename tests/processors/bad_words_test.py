import pytest
from transformers.generation import logits_process as hf

from keras_gen.processors import BadWords
from tests.processors import helpers

WORDS = [[3], [1, 2], [0, 4, 5], [5, 5], [2, 1, 0, 3]]


def test_matches_transformers():
    helpers.assert_parity(
        BadWords(WORDS), hf.NoBadWordsLogitsProcessor(WORDS), seeds=range(8)
    )


def test_contracts():
    helpers.assert_contracts(BadWords(WORDS))


def test_unknown_token_ids_are_rejected_by_generate(gpt2_lm):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        gpt2_lm.generate([1, 2], max_new_tokens=2, processors=[BadWords([[999]])])


@pytest.mark.parametrize("words", [[], [[]], [[-1]], [3]])
def test_invalid_words(words):
    with pytest.raises(ValueError):
        BadWords(words)
