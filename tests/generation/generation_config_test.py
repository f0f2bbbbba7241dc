import json
import os

import numpy as np
import pytest

from keras_gen import GenerationConfig
from keras_gen.generation.generation_config import OPTIONS

INF, NAN = float("inf"), float("nan")

# (options, error, text the message must hold): every option's bad values.
BAD = [
    ({"max_new_tokens": 0}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": -3}, ValueError, "max_new_tokens"),
    ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens"),
    ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
    ({"max_length": 0}, ValueError, "max_length"),
    ({"max_length": "10"}, TypeError, "max_length"),
    ({"cache_prompt": "yes"}, TypeError, "cache_prompt"),
    ({"top_logprobs": 21}, ValueError, "top_logprobs"),
    ({"max_length": 5, "max_new_tokens": 2}, ValueError, "not both"),
    ({"min_new_tokens": -1}, ValueError, "min_new_tokens"),
    ({"min_length": 1.0}, TypeError, "min_length"),
    ({"max_time": 0}, ValueError, "max_time"),
    ({"max_time": INF}, ValueError, "max_time"),
    ({"do_sample": 1}, TypeError, "do_sample"),
    ({"do_sample": "yes"}, TypeError, "do_sample"),
    ({"temperature": -0.5}, ValueError, "temperature"),
    ({"temperature": INF}, ValueError, "temperature"),
    ({"temperature": NAN}, ValueError, "temperature"),
    # Finite in Python, inf in the program's float32.
    ({"temperature": 1e300}, ValueError, "float32"),
    ({"presence_penalty": -1e39}, ValueError, "presence_penalty"),
    ({"temperature": "hot"}, TypeError, "temperature"),
    ({"top_k": -1}, ValueError, "top_k"),
    ({"top_k": 2.0}, TypeError, "top_k"),
    ({"top_p": 0}, ValueError, "top_p"),
    ({"top_p": 1.5}, ValueError, "top_p"),
    ({"top_p": NAN}, ValueError, "top_p"),
    ({"min_p": -0.1}, ValueError, "min_p"),
    ({"min_p": INF}, ValueError, "min_p"),
    ({"typical_p": 0}, ValueError, "typical_p"),
    ({"seed": 1.5}, TypeError, "seed"),
    ({"seed": "0"}, TypeError, "seed"),
    ({"num_beams": 0}, ValueError, "num_beams"),
    ({"length_penalty": 50}, ValueError, "length_penalty"),
    ({"length_penalty": NAN}, ValueError, "length_penalty"),
    ({"early_stopping": "sometimes"}, ValueError, "early_stopping"),
    ({"num_return_sequences": 0}, ValueError, "num_return_sequences"),
    ({"num_beams": 2, "num_return_sequences": 3}, ValueError, "num_return_sequences"),
    ({"penalty_alpha": 1.5}, ValueError, "penalty_alpha"),
    ({"do_sample": True, "num_beams": 4}, ValueError, "num_beams"),
    ({"do_sample": True, "penalty_alpha": 0.5}, ValueError, "penalty_alpha"),
    ({"num_beams": 4, "penalty_alpha": 0.5}, ValueError, "exclude"),
    ({"repetition_penalty": 0}, ValueError, "repetition_penalty"),
    ({"repetition_penalty": 1e-45}, ValueError, "repetition_penalty"),
    ({"repetition_penalty": 1e30}, ValueError, "repetition_penalty"),
    ({"repetition_penalty": NAN}, ValueError, "repetition_penalty"),
    ({"presence_penalty": 3}, ValueError, "presence_penalty"),
    ({"presence_penalty": -INF}, ValueError, "presence_penalty"),
    ({"frequency_penalty": -3e38}, ValueError, "frequency_penalty"),
    ({"frequency_penalty": "0.5"}, TypeError, "frequency_penalty"),
    ({"no_repeat_ngram_size": -1}, ValueError, "no_repeat_ngram_size"),
    ({"no_repeat_ngram_size": 17}, ValueError, "no_repeat_ngram_size"),
    ({"bad_words_ids": [1, 2]}, ValueError, "bad_words_ids"),
    ({"bad_words_ids": [[]]}, ValueError, "bad_words_ids"),
    ({"bad_words_ids": [[-1]]}, ValueError, "bad_words_ids"),
    ({"suppress_tokens": [1.5]}, ValueError, "suppress_tokens"),
    ({"suppress_tokens": "1"}, TypeError, "suppress_tokens"),
    ({"logit_bias": {1: NAN}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: INF}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: 1e39}}, ValueError, "logit_bias"),
    ({"logit_bias": {1: "big"}}, TypeError, "logit_bias"),
    ({"logit_bias": {-1: 1.0}}, ValueError, "logit_bias"),
    ({"logit_bias": [1, 2]}, TypeError, "logit_bias"),
    ({"logit_bias": {}}, ValueError, "logit_bias"),
    ({"forced_eos_token_id": -1}, ValueError, "forced_eos_token_id"),
    ({"top_n_sigma": -1.0}, ValueError, "top_n_sigma"),
    ({"top_n_sigma": "wide"}, TypeError, "top_n_sigma"),
    ({"eos_token_id": "2"}, TypeError, "eos_token_id"),
    ({"stop_token_ids": "eos"}, TypeError, "stop_token_ids"),
    ({"stop_token_ids": [1, -2]}, ValueError, "stop_token_ids"),
    ({"stop_strings": "###"}, TypeError, "stop_strings"),
    ({"stop_strings": [""]}, ValueError, "stop_strings"),
    ({"stop_sequences": [[1], "a"]}, ValueError, "stop_sequences"),
    ({"include_stop_string": "no"}, TypeError, "include_stop_string"),
    ({"output_scores": 1}, TypeError, "output_scores"),
    ({"output_log_probs": "yes"}, TypeError, "output_log_probs"),
    ({"num_speculative_tokens": 0}, ValueError, "num_speculative_tokens"),
    ({"prompt_lookup_ngram": 2.0}, TypeError, "prompt_lookup_ngram"),
    ({"response_format": "json"}, TypeError, "response_format"),
    ({"response_format": {"type": "yaml"}}, ValueError, "response_format"),
    ({"response_format": {"regex": "("}}, ValueError, "response_format"),
]


@pytest.mark.parametrize("options, error, text", BAD, ids=lambda x: repr(x)[:40])
def test_bad_values_raise_errors_naming_the_option(options, error, text):
    with pytest.raises(error, match=text):
        GenerationConfig(**options)


def test_the_table_covers_most_options():
    covered = {name for options, _, _ in BAD for name in options}
    assert len(BAD) >= 40
    assert len(covered) >= len(OPTIONS) - 3, set(OPTIONS) - covered


def test_numpy_scalars_are_numbers():
    config = GenerationConfig(
        temperature=np.float32(0.7),
        top_k=np.int64(5),
        top_p=np.float64(0.9),
        seed=np.int32(3),
        suppress_tokens=np.array([1, 2]),
        logit_bias={np.int64(4): np.float32(-1.5)},
    )
    assert config.temperature == 0.7 and type(config.temperature) is float
    assert config.top_k == 5 and type(config.top_k) is int
    assert config.suppress_tokens == [1, 2] and config.logit_bias == {4: -1.5}
    json.dumps(config.to_dict())


def test_unset_options_are_none_and_to_dict_keeps_only_set_ones():
    config = GenerationConfig(top_k=40)
    assert config.temperature is None
    assert config.to_dict() == {"top_k": 40}
    assert repr(config) == "GenerationConfig(top_k=40)"
    assert GenerationConfig.from_dict(config.to_dict()) == config


def test_from_dict_refuses_unknown_options():
    with pytest.raises(ValueError, match="tempreature"):
        GenerationConfig.from_dict({"tempreature": 0.5})
    with pytest.raises(TypeError, match="generation_config"):
        GenerationConfig.from_dict([("top_k", 4)])


def test_stop_token_ids_auto_is_the_default():
    assert GenerationConfig(stop_token_ids="auto").stop_token_ids is None
    assert GenerationConfig(stop_token_ids=[]).stop_token_ids == []


@pytest.mark.parametrize(
    "base, overrides, mode, expected",
    [
        # The call's numbers adjust the model's sampling.
        (
            {"do_sample": True, "top_k": 40, "temperature": 0.8},
            {"temperature": 0.5},
            "sample",
            {"top_k": 40, "temperature": 0.5},
        ),
        # Numbers without do_sample mean sampling (vLLM, OpenAI)...
        ({"do_sample": False}, {"temperature": 0.7}, "sample", {"temperature": 0.7}),
        # ... and temperature 0 (below 1e-5) greedy.
        ({"do_sample": True, "top_k": 40}, {"temperature": 0}, "greedy", {}),
        ({"do_sample": True, "top_k": 40}, {"do_sample": False}, "greedy", {}),
        # A mode the call chooses ends the model's.
        (
            {"do_sample": True, "top_k": 40},
            {"num_beams": 4},
            "beam",
            {"do_sample": False},
        ),
        ({"num_beams": 4}, {"do_sample": True}, "sample", {"num_beams": 1}),
        ({"num_beams": 4}, {"temperature": 0.7}, "beam", {"temperature": 0.7}),
        (
            {"penalty_alpha": 0.6, "top_k": 4},
            {"do_sample": True},
            "sample",
            {"penalty_alpha": 0.0},
        ),
        # Lengths replace each other.
        (
            {"max_new_tokens": 64},
            {"max_length": 30},
            "greedy",
            {"max_length": 30, "max_new_tokens": None},
        ),
    ],
)
def test_merge(base, overrides, mode, expected):
    merged = GenerationConfig(**base).merge(overrides)
    assert merged.mode == mode
    for name, value in expected.items():
        assert getattr(merged, name) == value, name


def test_outputs():
    config = GenerationConfig(output_scores=True, output_log_probs=True)
    assert config.outputs == ("log_probs", "scores")


def test_file_round_trip_and_transformers_reads_it(tmp_path):
    transformers = pytest.importorskip("transformers")
    config = GenerationConfig(
        do_sample=True,
        temperature=0.7,
        top_k=20,
        top_p=0.9,
        min_p=0.05,
        repetition_penalty=1.1,
        no_repeat_ngram_size=3,
        max_new_tokens=12,
        eos_token_id=[2, 3],
        logit_bias={5: -2.0, (1, 2): 1.0},
    )
    config.save_pretrained(tmp_path, extra={"bos_token_id": 1})
    assert GenerationConfig.from_pretrained(tmp_path) == config
    theirs = transformers.GenerationConfig.from_pretrained(tmp_path)
    assert (theirs.do_sample, theirs.temperature, theirs.top_k, theirs.top_p) == (
        True,
        0.7,
        20,
        0.9,
    )
    assert (theirs.min_p, theirs.repetition_penalty, theirs.max_new_tokens) == (
        0.05,
        1.1,
        12,
    )
    assert theirs.eos_token_id == [2, 3] and theirs.bos_token_id == 1


def test_files_are_read_as_transformers_reads_them(tmp_path):
    (tmp_path / "generation_config.json").write_text(
        json.dumps(
            {
                "temperature": 0.6,
                "top_p": 0.9,
                "max_length": 20,
                "max_new_tokens": 8,
                "transformers_version": "4.40.0",
                "_from_model_config": True,
                "bos_token_id": 1,
                "repetition_penalty": -1,
            }
        )
    )
    with pytest.warns(UserWarning, match="repetition_penalty"):
        config = GenerationConfig.from_pretrained(tmp_path)
    # No do_sample: greedy, as transformers reads the file.
    assert config.do_sample is False and config.mode == "greedy"
    assert config.max_new_tokens == 8 and config.max_length is None
    assert config.repetition_penalty is None
    assert GenerationConfig.from_pretrained(tmp_path / "missing") == GenerationConfig()
    (tmp_path / "generation_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        GenerationConfig.from_pretrained(tmp_path)


def test_frozen():
    with pytest.raises(Exception):
        GenerationConfig().temperature = 0.5
    assert GenerationConfig(top_k=3).replace(top_k=None) == GenerationConfig()


def _documented_options():
    """docs/generating.md's Options table: `{option: (flag cell, field cell)}`,
    in order."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "generating.md")
    text = open(path, encoding="utf-8").read()
    start = text.index("| `GenerationConfig` field |")
    rows = text[start : text.index("\n\n", start)].split("\n")[2:]
    table = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        table[cells[0].strip("`")] = (cells[1], cells[2])
    return table


def test_the_documented_options_table_is_the_option_table():
    table = _documented_options()
    assert list(table) == list(OPTIONS)
    for name, meta in OPTIONS.items():
        flag, field = table[name]
        if meta["flag"]:
            assert f"`--{name.replace('_', '-')}`" in flag, name
        if meta["field"]:
            assert f"`{meta['field']}`" in field, name
