import itertools

import numpy as np
import pytest
from keras import ops

from keras_gen import backend
from keras_gen import samplers
from keras_gen.models import GPT2CausalLM
from keras_gen.samplers import BeamSampler
from tests.conftest import tiny_gpt2_backbone

PROMPT = [5, 9, 2, 33]
RAGGED = [[5, 9, 2, 33], [7, 1, 40, 22, 3, 8, 11], [60]]


# A fake model for the search alone: the next token's log-probs depend on
# the last token only, through a fixed table.
def table_next(table):
    table = ops.convert_to_tensor(table, "float32")

    def next(prompt, state, index):
        last = backend.slice(prompt, index - 1, 1, axis=1)[:, 0]
        return ops.take(table, last, axis=0), None, state

    return next


def log_softmax_table(seed, vocabulary_size):
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.standard_normal((vocabulary_size, vocabulary_size))
    return logits - np.log(np.exp(logits).sum(-1, keepdims=True))


def test_enough_beams_is_exhaustive_search():
    # With num_beams >= vocab**(steps - 1) no sequence is ever dropped, so
    # the search must find the best of all vocab**steps continuations.
    table = log_softmax_table(0, 5)
    brute = sorted(
        (
            (table[0, a] + table[a, b] + table[b, c], [0, a, b, c])
            for a, b, c in itertools.product(range(5), repeat=3)
        ),
        reverse=True,
    )
    sampler = BeamSampler(num_beams=25, num_return_sequences=3)
    state = ops.zeros((1, 1))
    outputs = sampler(table_next(table), [[0, 0, 0, 0]], state, index=1)
    token_ids = ops.convert_to_numpy(outputs["token_ids"]).tolist()
    assert token_ids == [tokens for _, tokens in brute[:3]]
    np.testing.assert_allclose(
        ops.convert_to_numpy(outputs["sequence_scores"]),
        [score / 3 for score, _ in brute[:3]],
        rtol=1e-5,
    )


def test_beam_finds_what_greedy_misses():
    # Greedy takes 1 (p=0.5) and then a flat 1/4; beam takes 2 (p=0.4) and
    # then the sure 3: 0.4 > 0.5 * 0.25.
    probabilities = np.full((4, 4), 0.25)
    probabilities[0] = [0.0, 0.5, 0.4, 0.1]
    probabilities[2] = [0.0, 0.0, 0.0, 1.0]
    table = np.log(np.maximum(probabilities, 1e-9))
    outputs = BeamSampler(num_beams=2)(
        table_next(table), [[0, 0, 0]], ops.zeros((1, 1)), index=1
    )
    assert ops.convert_to_numpy(outputs["token_ids"]).tolist() == [[0, 2, 3]]


# The same search as transformers, on a tiny random GPT-2 of transformers'.


@pytest.fixture(scope="module")
def hf_model():
    pytest.importorskip("transformers")
    from tests.models.gpt2.hf_gpt2 import make_hf_gpt2

    return make_hf_gpt2(seed=0)


@pytest.fixture(scope="module")
def beam_lm(hf_model):
    from tests.models.gpt2.hf_gpt2 import gpt2_from_hf

    lm = gpt2_from_hf(hf_model)
    lm.compile(sampler=BeamSampler(num_beams=3, num_return_sequences=3))
    return lm


def hf_generate(hf_model, prompt, stop, **kwargs):
    """transformers' beam search, 3 beams and sequences, with its outputs."""
    import torch

    return hf_model.generate(
        torch.tensor([prompt]),
        num_beams=3,
        do_sample=False,
        num_return_sequences=3,
        output_scores=True,
        output_logits=True,
        return_dict_in_generate=True,
        eos_token_id=stop,
        pad_token_id=0 if stop is None else stop,
        **kwargs,
    )


def hf_beam_search(hf_model, prompt, stop, **kwargs):
    output = hf_generate(hf_model, prompt, stop, **kwargs)
    sequences = []
    for row in output.sequences.tolist():
        # Cut transformers' padding after a hypothesis's stop token.
        ends = [i for i in range(len(prompt), len(row)) if row[i] == stop]
        sequences.append(row[: ends[0] + 1] if ends else row)
    return sequences, output.sequences_scores.numpy()


def beam_search(lm, prompts, stop, length_penalty, early_stopping, **kwargs):
    # Tunable numbers: no new program.
    lm.sampler.length_penalty = length_penalty
    lm.sampler.early_stopping = early_stopping
    return lm.generate(
        prompts,
        stop_token_ids=None if stop is None else [stop],
        return_dict=True,
        **kwargs,
    )


SETTINGS = [(1.0, False), (0.5, True), (-1.0, False), (2.0, "never")]


@pytest.mark.parametrize("length_penalty, early_stopping", SETTINGS)
def test_matches_transformers_without_stop_token(
    hf_model, beam_lm, length_penalty, early_stopping
):
    expected, scores = hf_beam_search(
        hf_model,
        PROMPT,
        None,
        max_new_tokens=10,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
    )
    result = beam_search(
        beam_lm,
        PROMPT,
        None,
        length_penalty,
        early_stopping,
        max_new_tokens=10,
    )
    assert result["sequences"] == expected
    np.testing.assert_allclose(result["sequence_scores"], scores, atol=1e-4)


@pytest.mark.parametrize("length_penalty, early_stopping", SETTINGS)
def test_matches_transformers_with_a_stop_token(
    hf_model, beam_lm, length_penalty, early_stopping
):
    # A token that the best beam emits early without a stop token.
    unstopped, _ = hf_beam_search(hf_model, PROMPT, None, max_new_tokens=10)
    stop = unstopped[0][len(PROMPT) + 2]
    expected, scores = hf_beam_search(
        hf_model,
        PROMPT,
        stop,
        max_new_tokens=10,
        length_penalty=length_penalty,
        early_stopping=early_stopping,
    )
    assert any(row[-1] == stop for row in expected)  # the stop token occurs
    result = beam_search(
        beam_lm,
        PROMPT,
        stop,
        length_penalty,
        early_stopping,
        max_new_tokens=10,
    )
    assert result["sequences"] == expected
    np.testing.assert_allclose(result["sequence_scores"], scores, atol=1e-4)


@pytest.mark.parametrize("with_stop", [False, True])
def test_ragged_batch_matches_transformers_row_by_row(hf_model, beam_lm, with_stop):
    # Rows start generating at different steps; each row's beams must match
    # a search on that prompt alone.
    stop = None
    if with_stop:  # a token that the longest prompt's best beam emits early
        unstopped, _ = hf_beam_search(hf_model, RAGGED[1], None, max_new_tokens=9)
        stop = unstopped[0][len(RAGGED[1]) + 1]
    result = beam_search(beam_lm, RAGGED, stop, 1.0, False, max_new_tokens=9)
    occurred = False
    # Flat rows: prompt b's three sequences are rows 3b to 3b + 2.
    for b, prompt in enumerate(RAGGED):
        sequences = result["sequences"][3 * b : 3 * b + 3]
        scores = result["sequence_scores"][3 * b : 3 * b + 3]
        expected, expected_scores = hf_beam_search(
            hf_model, prompt, stop, max_new_tokens=9
        )
        assert sequences == expected
        np.testing.assert_allclose(scores, expected_scores, atol=1e-4)
        occurred |= any(row[-1] == stop for row in expected)
    assert occurred or stop is None


# Per-step outputs of every returned sequence, against transformers'
# `compute_transition_scores(sequences, scores, beam_indices)`.


def hf_transitions(hf_model, prompt, stop, **kwargs):
    """Per returned sequence: its new tokens' log-probs and raw logits."""
    output = hf_generate(hf_model, prompt, stop, **kwargs)
    transitions = hf_model.compute_transition_scores(
        output.sequences, output.scores, output.beam_indices
    ).numpy()
    beam_indices = output.beam_indices.numpy()
    rows = []
    for r, row in enumerate(output.sequences.tolist()):
        new = row[len(prompt) :]
        length = next((i + 1 for i, t in enumerate(new) if t == stop), len(new))
        logits = np.stack(
            [output.logits[t][beam_indices[r, t]].numpy() for t in range(length)]
        )
        rows.append((transitions[r, :length], logits))
    return rows


@pytest.mark.parametrize(
    "length_penalty, early_stopping, with_stop",
    [
        (1.0, False, False),
        (0.5, True, True),
        (2.0, "never", True),
        (-1.0, False, False),
    ],
)
def test_per_step_outputs_match_transformers_transition_scores(
    hf_model, beam_lm, length_penalty, early_stopping, with_stop
):
    stop = None
    if with_stop:  # a token that the longest prompt's best beam emits early
        unstopped, _ = hf_beam_search(hf_model, RAGGED[1], None, max_new_tokens=9)
        stop = unstopped[0][len(RAGGED[1]) + 1]
    result = beam_search(
        beam_lm,
        RAGGED,
        stop,
        length_penalty,
        early_stopping,
        max_new_tokens=9,
        output_log_probs=True,
        output_logits=True,
        output_scores=True,
    )
    for b, prompt in enumerate(RAGGED):
        expected = hf_transitions(
            hf_model,
            prompt,
            stop,
            max_new_tokens=9,
            length_penalty=length_penalty,
            early_stopping=early_stopping,
        )
        for j, (log_probs, logits) in enumerate(expected):
            r = 3 * b + j
            assert len(result.log_probs[r]) == len(result.token_ids[r])
            np.testing.assert_allclose(result.log_probs[r], log_probs, atol=1e-4)
            np.testing.assert_allclose(result.logits[r], logits, atol=1e-4)
            # Temperature 1, no processors: scores are the logits.
            np.testing.assert_allclose(result.scores[r], logits, atol=1e-4)
            generated = len(result.token_ids[r])
            np.testing.assert_allclose(
                result.log_probs[r].sum() / generated**length_penalty,
                result.sequence_scores[r],
                atol=1e-4,
            )


def test_per_step_outputs_follow_the_hypothesis_not_the_row():
    # The search alone, on a table model: every returned sequence's
    # log-probs are its own tokens' under the table, and its hidden states
    # and top alternatives those of the beam that produced each token.
    table = log_softmax_table(3, 6)
    sampler = BeamSampler(num_beams=4, num_return_sequences=4)

    def next(prompt, state, index):
        last = backend.slice(prompt, index - 1, 1, axis=1)[:, 0]
        hidden = ops.one_hot(last, 6)  # the token the step read
        return ops.take(ops.convert_to_tensor(table, "float32"), last, 0), hidden, state

    width, top = 6, 2
    outputs = {
        "log_probs": ops.zeros((1, width)),
        "hidden_states": ops.zeros((1, width, 6)),
        "top_log_probs": ops.zeros((1, width, top)),
        "top_token_ids": ops.zeros((1, width, top), "int32"),
    }
    sampler = sampler.bound(sampler.get_parameter_tensors())
    loop = sampler.start([[0] * width], ops.zeros((1, 1)), 1, outputs=outputs)
    result = sampler.finish(sampler.run(next, loop))
    token_ids = ops.convert_to_numpy(result["token_ids"])
    for r, row in enumerate(token_ids):
        previous, chosen = row[:-1], row[1:]
        np.testing.assert_allclose(
            ops.convert_to_numpy(result["log_probs"])[r, 1:],
            table[previous, chosen],
            rtol=1e-5,
        )
        np.testing.assert_array_equal(
            ops.convert_to_numpy(result["hidden_states"])[r, 1:], np.eye(6)[previous]
        )
        np.testing.assert_array_equal(
            ops.convert_to_numpy(result["top_token_ids"])[r, 1:],
            np.argsort(-table[previous], axis=-1)[:, :top],
        )
        np.testing.assert_allclose(
            ops.convert_to_numpy(result["sequence_scores"])[r],
            table[previous, chosen].sum() / (width - 1),
            rtol=1e-5,
        )


def test_no_recompilation(beam_lm, traces):
    beam_search(beam_lm, [1, 2, 3], None, 1.0, False, max_length=20)
    first = traces()
    for prompts, max_length, length_penalty, early_stopping in [
        ([1, 2, 3, 4, 5, 6, 7, 8, 9], 30, 0.5, True),
        ([4, 5, 6, 7, 8, 9, 10, 11, 12, 13], 24, -2.0, "never"),
    ]:
        beam_lm.sampler.temperature = 0.7
        beam_search(
            beam_lm,
            prompts,
            3,
            length_penalty,
            early_stopping,
            max_length=max_length,
        )
    beam_lm.sampler.temperature = 1.0
    assert traces() == first


def test_cache_is_num_beams_times_the_batch_and_keeps_its_shape():
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    sampler = BeamSampler(num_beams=4)
    token_ids = np.array([[1, 2, 3, 0, 0, 0], [4, 5, 0, 0, 0, 0]], "int32")
    _, state = lm.backbone.build_state(token_ids, cache_length=6)
    mask = token_ids > 0
    sampler = sampler.bound(sampler.get_parameter_tensors())
    loop = sampler.start(token_ids, state, 2, mask=mask)
    shapes = [tuple(ops.shape(x)) for pair in loop.state for x in pair]
    assert shapes == [(8, 2, 6, 8)] * 4
    loop = sampler.step(lm.next, loop)
    assert [tuple(ops.shape(x)) for pair in loop.state for x in pair] == shapes


def test_generate_forms(beam_lm):
    beam_lm.sampler.length_penalty, beam_lm.sampler.early_stopping = 1.0, False
    one = beam_lm.generate(PROMPT, max_new_tokens=4, stop_token_ids=None)
    assert len(one) == 3 and all(len(row) == 8 for row in one)
    batch = beam_lm.generate(RAGGED, max_new_tokens=4, stop_token_ids=None)
    assert [len(rows) for rows in batch] == [3, 3, 3]
    assert [rows[0] for rows in batch] == [
        beam_lm.generate(prompt, max_new_tokens=4, stop_token_ids=None)[0]
        for prompt in RAGGED
    ]
    packed = beam_lm.generate(
        {"token_ids": np.array([PROMPT]), "padding_mask": np.ones((1, 4), bool)},
        max_new_tokens=4,
        stop_token_ids=None,
        return_dict=True,
    )
    assert packed.sequences == one
    assert len(packed.sequence_scores) == 3


def test_one_sequence_per_prompt_by_default():
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.compile(sampler="beam")
    assert isinstance(lm.sampler, BeamSampler) and lm.sampler.num_beams == 5
    result = lm.generate([[1, 2], [3]], max_new_tokens=3, return_dict=True)
    assert [len(row) for row in result["sequences"]] == [5, 4]
    assert all(isinstance(score, float) for score in result["sequence_scores"])


def test_config_round_trip():
    sampler = BeamSampler(
        num_beams=4,
        length_penalty=0.3,
        early_stopping="never",
        num_return_sequences=2,
    )
    clone = samplers.get(samplers.serialize(sampler))
    assert isinstance(clone, BeamSampler)
    assert clone.get_config() == sampler.get_config()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"num_beams": 0}, ValueError, "num_beams"),
        ({"num_beams": 2.5}, TypeError, "num_beams"),
        ({"num_beams": 2, "num_return_sequences": 3}, ValueError, "<= `num_beams`"),
        ({"num_return_sequences": 0}, ValueError, "num_return_sequences"),
        ({"length_penalty": "long"}, TypeError, "length_penalty"),
        ({"early_stopping": "sometimes"}, ValueError, "early_stopping"),
        ({"temperature": 0}, ValueError, "temperature"),
    ],
)
def test_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        BeamSampler(**kwargs)
