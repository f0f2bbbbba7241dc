"""Hostile option values: each is refused by name before any work is paid
(no compile, no table, no allocation that grows with the value)."""

import numpy as np
import pytest

from keras_gen import GenerationConfig
from keras_gen import processors
from keras_gen.generation.generation_config import MAX_RETURN_SEQUENCES
from keras_gen.generation.generation_config import MAX_STOP_STRING_LENGTH
from keras_gen.generation.generation_config import MAX_STOP_STRINGS
from keras_gen.kernels import automaton
from keras_gen.utils import checks

HUGE = 10**12
CASES = [
    # (options, error, what the message names)
    ({"top_k": HUGE}, ValueError, "top_k"),
    ({"top_k": 2**31}, ValueError, "top_k"),
    ({"top_k": -1}, ValueError, "top_k"),
    ({"num_return_sequences": HUGE}, ValueError, "num_return_sequences"),
    (
        {"num_return_sequences": MAX_RETURN_SEQUENCES + 1},
        ValueError,
        "num_return_sequences",
    ),
    ({"num_beams": HUGE}, ValueError, "num_beams"),
    ({"num_beams": 0}, ValueError, "num_beams"),
    ({"num_speculative_tokens": HUGE}, ValueError, "num_speculative_tokens"),
    ({"num_speculative_tokens": 0}, ValueError, "num_speculative_tokens"),
    ({"prompt_lookup_ngram": 1000}, ValueError, "prompt_lookup_ngram"),
    (
        {"prompt_lookup_ngram": checks.MAX_NGRAM_SIZE + 1},
        ValueError,
        "prompt_lookup_ngram",
    ),
    ({"no_repeat_ngram_size": 1000}, ValueError, "no_repeat_ngram_size"),
    ({"stop_strings": ["x" * 10000]}, ValueError, "stop_strings"),
    (
        {"stop_strings": ["x" * (MAX_STOP_STRING_LENGTH + 1)]},
        ValueError,
        "stop_strings",
    ),
    (
        {"stop_strings": ["s%d" % i for i in range(MAX_STOP_STRINGS + 1)]},
        ValueError,
        "stop_strings",
    ),
    ({"stop_strings": ["ok", ""]}, ValueError, "stop_strings"),
    ({"stop_strings": "lone"}, TypeError, "stop_strings"),
    ({"stop_strings": [3]}, ValueError, "stop_strings"),
    ({"stop_sequences": [[1] * 100000]}, ValueError, "stop_sequences"),
    (
        {"stop_sequences": [[1]] * (checks.MAX_ID_SEQUENCES + 1)},
        ValueError,
        "stop_sequences",
    ),
    ({"stop_sequences": [[]]}, ValueError, "stop_sequences"),
    ({"bad_words_ids": [[1] * 100000]}, ValueError, "bad_words_ids"),
    (
        {"bad_words_ids": [[1, 2]] * (checks.MAX_ID_SEQUENCES + 1)},
        ValueError,
        "bad_words_ids",
    ),
    ({"bad_words_ids": [[-1]]}, ValueError, "bad_words_ids"),
    ({"logit_bias": {tuple([1] * 1000): 1.0}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: float("nan")}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: float("inf")}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: 1e30}}, ValueError, "logit_bias"),
    ({"logit_bias": {"x": 1.0}}, ValueError, "logit_bias"),
    ({"temperature": float("nan")}, ValueError, "temperature"),
    ({"temperature": float("inf")}, ValueError, "temperature"),
    ({"temperature": 1e39}, ValueError, "temperature"),
    ({"temperature": -1}, ValueError, "temperature"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_p": float("nan")}, ValueError, "top_p"),
    ({"top_p": 0}, ValueError, "top_p"),
    ({"min_p": 2}, ValueError, "min_p"),
    ({"typical_p": -0.5}, ValueError, "typical_p"),
    ({"top_n_sigma": float("inf")}, ValueError, "top_n_sigma"),
    ({"top_n_sigma": -1}, ValueError, "top_n_sigma"),
    ({"repetition_penalty": 0}, ValueError, "repetition_penalty"),
    ({"repetition_penalty": 1e9}, ValueError, "repetition_penalty"),
    ({"frequency_penalty": 1e9}, ValueError, "frequency_penalty"),
    ({"presence_penalty": float("-inf")}, ValueError, "presence_penalty"),
    ({"length_penalty": 100}, ValueError, "length_penalty"),
    ({"penalty_alpha": 2}, ValueError, "penalty_alpha"),
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 1.5}, TypeError, "max_new_tokens"),
    ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
    ({"max_length": -3}, ValueError, "max_length"),
    ({"max_time": 0}, ValueError, "max_time"),
    ({"max_time": float("nan")}, ValueError, "max_time"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"top_logprobs": 21}, ValueError, "top_logprobs"),
    ({"top_logprobs": -1}, ValueError, "top_logprobs"),
    ({"min_new_tokens": -1}, ValueError, "min_new_tokens"),
    ({"suppress_tokens": [-5]}, ValueError, "suppress_tokens"),
    ({"suppress_tokens": "abc"}, TypeError, "suppress_tokens"),
    ({"forced_eos_token_id": [1.5]}, ValueError, "forced_eos_token_id"),
    ({"stop_token_ids": "eos"}, TypeError, "stop_token_ids"),
    ({"early_stopping": "sometimes"}, ValueError, "early_stopping"),
    ({"do_sample": "yes"}, TypeError, "do_sample"),
    ({"output_scores": 1}, TypeError, "output_scores"),
    ({"response_format": "json"}, TypeError, "response_format"),
    (
        {"response_format": {"type": "regex", "pattern": "a{100000}"}},
        ValueError,
        "response_format",
    ),
    (
        {
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "array", "minItems": 10**6}},
            }
        },
        ValueError,
        "response_format",
    ),
    (
        {"response_format": {"type": "regex", "pattern": "(a"}},
        ValueError,
        "response_format",
    ),
    ({"response_format": {"type": "nonsense"}}, ValueError, "response_format"),
    ({"num_beams": 2, "do_sample": True}, ValueError, "do_sample"),
    ({"num_beams": 2, "num_return_sequences": 3}, ValueError, "num_return_sequences"),
    ({"max_length": 5, "max_new_tokens": 5}, ValueError, "max_length"),
    ({"not_an_option": 1}, ValueError, "not_an_option"),
]


@pytest.mark.parametrize(
    "options, error, name", CASES, ids=[repr(c[0])[:60] for c in CASES]
)
def test_a_hostile_option_is_refused_by_name(options, error, name):
    with pytest.raises(error, match=name):
        GenerationConfig.from_dict(options)


@pytest.mark.parametrize(
    "pattern, refused",
    [
        ("a{100000}", True),
        ("(a{100}){100}", True),
        ("(ab|cd){3000}", True),
        (".{0,1000}", True),
        ("[^x]{5000}", True),
        ("[0-9]{4}-[0-9]{2}", False),
        ("(yes|no)", False),
        ("[a-z ]{0,200}", False),
        (r"\p{L}{1,50}", False),
    ],
)
def test_the_automaton_size_is_estimated_before_it_is_built(pattern, refused):
    if refused:
        with pytest.raises(ValueError, match="too large.*largest repetition count"):
            processors.Regex(pattern)
    else:
        assert processors.Regex(pattern).regex == pattern


def test_regex_size_reads_nesting_alternatives_and_classes():
    def size(pattern):
        return automaton.regex_size(pattern)[0]

    assert size("abc") == 3
    assert size("(ab){3}") == 6
    assert size("a|b|c") == 3
    assert size("(a{10}){10}") == 100
    assert size("x{3,}") == 4
    assert size("[]a]b") == 2  # a leading `]` is in the class
    assert size(r"[\]]{2}") == 2
    assert size("a{,3}") == 5  # not a repetition in Rust's syntax: literal
    assert size(".") == size("[^a]") == automaton.WIDE_CHARACTER_SIZE
    # The JSON object format stays well within the bound.
    assert size(processors.JsonObject().pattern()) < automaton.MAX_REGEX_SIZE


def test_a_huge_token_list_costs_its_length_not_length_times_vocabulary():
    from keras import ops

    from keras_gen.kernels.filters import token_mask

    ids = np.arange(0, 200_000, 3, dtype="int32")  # (66667,) ids, vocab 200k
    mask = ops.convert_to_numpy(token_mask(ids, 200_000))
    assert mask.shape == (1, 200_000) and mask.sum() == len(ids)
    assert mask[0, 3] and not mask[0, 4]


EDGES = [
    # (options, the value kept): the largest accepted values are accepted.
    ({"top_k": 2**31 - 1}, 2**31 - 1),
    ({"top_k": np.int64(5)}, 5),
    ({"num_return_sequences": MAX_RETURN_SEQUENCES}, MAX_RETURN_SEQUENCES),
    ({"num_beams": MAX_RETURN_SEQUENCES}, MAX_RETURN_SEQUENCES),
    ({"prompt_lookup_ngram": checks.MAX_NGRAM_SIZE}, checks.MAX_NGRAM_SIZE),
    (
        {"num_speculative_tokens": checks.MAX_SPECULATIVE_TOKENS},
        checks.MAX_SPECULATIVE_TOKENS,
    ),
    (
        {"stop_strings": ["x" * MAX_STOP_STRING_LENGTH] * MAX_STOP_STRINGS},
        ["x" * MAX_STOP_STRING_LENGTH] * MAX_STOP_STRINGS,
    ),
    (
        {"stop_sequences": [[1] * checks.MAX_ID_SEQUENCE_LENGTH]},
        [[1] * checks.MAX_ID_SEQUENCE_LENGTH],
    ),
    (
        {"bad_words_ids": [[1, 2]] * checks.MAX_ID_SEQUENCES},
        [[1, 2]] * checks.MAX_ID_SEQUENCES,
    ),
    ({"logit_bias": {1: float("-inf")}}, {1: float("-inf")}),
    ({"temperature": np.float32(0.7)}, 0.7),
    ({"temperature": 0}, 0.0),
    ({"top_p": 1}, 1.0),
    ({"seed": 10**30}, 10**30),
    ({"stop_token_ids": []}, []),
]


@pytest.mark.parametrize("options, kept", EDGES, ids=[repr(e[0])[:50] for e in EDGES])
def test_the_largest_accepted_values_are_kept(options, kept):
    ((name, _),) = options.items()
    assert getattr(GenerationConfig.from_dict(options), name) == kept
