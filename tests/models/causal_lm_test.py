import keras
import numpy as np
import pytest
from keras import ops

from keras_gen import samplers
from keras_gen.models import CausalLM
from keras_gen.models import GPT2CausalLM
from tests.conftest import tiny_gpt2_backbone
from tests.models.gpt2 import numpy_gpt2

PROMPTS = [[5, 9, 2, 33, 61], [7], [1, 2, 3]]


def test_greedy_equals_full_rerun_without_cache(gpt2_lm):
    for prompt in PROMPTS:
        expected = numpy_gpt2.greedy(gpt2_lm.backbone, prompt, 12)
        assert gpt2_lm.generate(prompt, max_new_tokens=12) == expected


def test_prompt_logits_match_cached_decoding(gpt2_lm):
    # The first generated token's logits come from the cache seeded by the
    # prompt; the oracle re-runs the whole prompt.
    prompt = [5, 9, 2, 33, 61]
    _, state = gpt2_lm.backbone.build_state(
        np.array([prompt[:-1]], "int32"), cache_length=8
    )
    logits, _, _ = gpt2_lm.next(
        ops.convert_to_tensor([prompt + [0, 0, 0]], "int32"),
        state,
        ops.convert_to_tensor(len(prompt), "int32"),
    )
    np.testing.assert_allclose(
        ops.convert_to_numpy(logits)[0],
        numpy_gpt2.logits(gpt2_lm.backbone, prompt)[-1],
        atol=1e-4,
    )


def test_ragged_batch_rows_match_each_prompt_alone(gpt2_lm):
    batch = gpt2_lm.generate(PROMPTS, max_new_tokens=9)
    alone = [gpt2_lm.generate(p, max_new_tokens=9) for p in PROMPTS]
    assert batch == alone
    assert [len(row) for row in batch] == [len(p) + 9 for p in PROMPTS]


def test_max_length_counts_prompt_and_new_tokens(gpt2_lm):
    rows = gpt2_lm.generate(PROMPTS, max_length=11)
    assert [len(row) for row in rows] == [11, 11, 11]
    assert [row[: len(p)] for row, p in zip(rows, PROMPTS)] == PROMPTS


def test_stop_token_ids_stop_each_row_on_its_own(gpt2_lm):
    free = gpt2_lm.generate(PROMPTS, max_new_tokens=10, stop_token_ids=None)
    # Stop on the 3rd new token of row 0: row 0 ends there, others go on
    # unless they emit the same token.
    stop = free[0][len(PROMPTS[0]) + 2]
    rows = gpt2_lm.generate(PROMPTS, max_new_tokens=10, stop_token_ids=[stop])
    for row, free_row, prompt in zip(rows, free, PROMPTS):
        new = free_row[len(prompt) :]
        cut = new.index(stop) + 1 if stop in new else len(new)
        assert row == prompt + new[:cut]
    assert rows[0][-1] == stop


def test_stop_tokens_in_the_prompt_do_not_stop(gpt2_lm):
    prompt = [5, 9, 2]
    rows = gpt2_lm.generate(prompt, max_new_tokens=4, stop_token_ids=[9])
    assert rows[:3] == prompt and len(rows) > 3


def test_strip_prompt(gpt2_lm):
    full = gpt2_lm.generate(PROMPTS, max_new_tokens=4)
    new = gpt2_lm.generate(PROMPTS, max_new_tokens=4, strip_prompt=True)
    assert new == [row[len(p) :] for row, p in zip(full, PROMPTS)]


def test_dict_in_dict_out_like_keras_hub(gpt2_lm):
    token_ids = np.array([[5, 9, 2, 0, 0, 0, 0, 0], [7, 1, 0, 0, 0, 0, 0, 0]])
    mask = token_ids != 0
    outputs = gpt2_lm.generate({"token_ids": token_ids, "padding_mask": mask})
    assert set(outputs) == {"token_ids", "padding_mask"}
    assert outputs["token_ids"].shape == (2, 8)
    expected = gpt2_lm.generate([[5, 9, 2], [7, 1]], max_length=8)
    np.testing.assert_array_equal(outputs["token_ids"], np.array(expected))
    assert outputs["padding_mask"].all()


def test_left_padded_dict_is_read_by_its_mask(gpt2_lm):
    token_ids = np.array([[0, 0, 5, 9, 2]])
    outputs = gpt2_lm.generate(
        {"token_ids": token_ids, "padding_mask": token_ids != 0},
        max_new_tokens=3,
    )
    assert outputs["token_ids"][0].tolist()[:6] == gpt2_lm.generate(
        [5, 9, 2], max_new_tokens=3
    )


def test_one_program_serves_prompt_lengths_and_max_lengths(gpt2_lm, traces):
    gpt2_lm.generate([[1, 2, 3], [4, 5]], max_length=20)
    assert traces() == 1
    gpt2_lm.generate([[1, 2, 3, 4, 5, 6, 7], [4]], max_length=25)
    gpt2_lm.generate([[9], [4, 5, 6, 7, 8]], max_new_tokens=12)
    assert traces() == 1


def test_sampler_settings_change_without_retracing(gpt2_backbone, traces):
    lm = GPT2CausalLM(gpt2_backbone)
    lm.compile(sampler=samplers.TopPSampler(p=0.9, k=5))
    first = lm.generate([1, 2, 3], max_new_tokens=8, seed=3)
    lm.sampler.temperature = 1e-4
    lm.sampler.k = 1
    lm.sampler.p = 0.5
    cold = lm.generate([1, 2, 3], max_new_tokens=8, seed=3)
    assert traces() == 1
    lm.compile(sampler="greedy")
    assert cold == lm.generate([1, 2, 3], max_new_tokens=8)
    assert first != cold


def test_compile_resets_the_generate_function(gpt2_lm):
    gpt2_lm.generate([1, 2], max_new_tokens=2)
    assert gpt2_lm.generate_function is not None
    gpt2_lm.compile(sampler="top_k")
    assert gpt2_lm.generate_function is None
    assert isinstance(gpt2_lm.sampler, samplers.TopKSampler)


@pytest.mark.parametrize("sampler", ["random", "top_k", "top_p", "min_p"])
def test_seed_makes_sampling_reproducible(gpt2_lm, sampler):
    gpt2_lm.compile(sampler=sampler)
    kwargs = dict(max_new_tokens=16)
    first = gpt2_lm.generate(PROMPTS, seed=42, **kwargs)
    assert gpt2_lm.generate(PROMPTS, seed=42, **kwargs) == first
    others = [gpt2_lm.generate(PROMPTS, seed=s, **kwargs) for s in (1, 2, 3)]
    assert any(other != first for other in others)


@pytest.mark.parametrize(
    "sampler",
    [
        samplers.RandomSampler(temperature=1e-5),
        samplers.TopKSampler(k=1),
        samplers.TopKSampler(k=10, temperature=1e-5),
        samplers.TopPSampler(p=0.9, temperature=1e-5),
        samplers.MinPSampler(p=0.05, temperature=1e-5),
    ],
)
def test_cold_samplers_equal_greedy(gpt2_lm, sampler):
    greedy = gpt2_lm.generate(PROMPTS, max_new_tokens=10)
    gpt2_lm.compile(sampler=sampler)
    assert gpt2_lm.generate(PROMPTS, max_new_tokens=10, seed=7) == greedy


def test_override_generate_step_is_used(gpt2_backbone):
    class ConstantLM(GPT2CausalLM):
        def generate_step(self, inputs, prefill_length, **kwargs):
            return {"token_ids": ops.ones_like(inputs["token_ids"]) * 3}

    lm = ConstantLM(gpt2_backbone)
    assert lm.generate([1, 2], max_new_tokens=2, stop_token_ids=None) == [1, 2, 3, 3]


def test_override_make_generate_function_is_used(gpt2_backbone):
    calls = []

    class CountingLM(GPT2CausalLM):
        def make_generate_function(self, **kwargs):
            function = super().make_generate_function(**kwargs)

            def wrapped(*args, **kwargs):
                calls.append(1)
                return function(*args, **kwargs)

            return wrapped

    lm = CountingLM(gpt2_backbone)
    lm.generate([1, 2], max_new_tokens=2)
    assert calls == [1]


def test_call_returns_logits(gpt2_lm):
    logits = gpt2_lm(np.array([[5, 9, 2]]))
    assert tuple(logits.shape) == (1, 3, 64)


def test_same_weights_give_same_tokens_on_every_backend():
    # The numpy oracle is backend-free; each backend's run is compared to
    # it, so the three backends agree with each other.
    backbone = tiny_gpt2_backbone(seed=1)
    lm = GPT2CausalLM(backbone)
    expected = [numpy_gpt2.greedy(backbone, p, 15) for p in PROMPTS]
    assert lm.generate(PROMPTS, max_new_tokens=15) == expected


@pytest.mark.parametrize("quantize_activations", [False, True])
def test_int8_quantization_keeps_greedy_tokens_close(gpt2_lm, quantize_activations):
    kwargs = dict(max_new_tokens=12, return_dict=True, output_log_probs=True)
    reference = gpt2_lm.generate(PROMPTS, **kwargs)
    gpt2_lm.quantize("int8", quantize_activations=quantize_activations)
    assert gpt2_lm.generate_function is None
    assert "int8" in {v.dtype for v in gpt2_lm.backbone.weights}
    # Weight-only by default: activations stay float.
    dense = gpt2_lm.backbone.transformer_layers[0].c_fc
    assert (dense.inputs_quantizer is not None) == quantize_activations
    quantized = gpt2_lm.generate(PROMPTS, **kwargs)
    assert quantized.token_ids == reference.token_ids
    drift = max(
        np.abs(a - b).max() for a, b in zip(reference.log_probs, quantized.log_probs)
    )
    assert drift < 0.25


def test_training_with_fit(gpt2_lm):
    token_ids = np.random.default_rng(0).integers(0, 64, (4, 9))
    history = gpt2_lm.fit(token_ids[:, :-1], token_ids[:, 1:], epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(inputs=[]), TypeError, "inputs"),
        (dict(inputs=[[1, 2], []]), ValueError, "empty prompt"),
        (dict(inputs=[1, 200]), ValueError, "outside the vocabulary"),
        (dict(inputs=[1, -1]), ValueError, "outside the vocabulary"),
        (dict(inputs=[1.5, 2.0]), TypeError, "inputs"),
        (dict(inputs="hello"), ValueError, "tokenizer"),
        (dict(inputs=[1, 2]), ValueError, "max_new_tokens"),
        (dict(inputs=[1, 2], max_length=5, max_new_tokens=2), ValueError, "not both"),
        (dict(inputs=[1, 2, 3], max_length=2), ValueError, "max_length"),
        (dict(inputs=[1, 2], max_length=0), ValueError, "max_length"),
        (dict(inputs=[1, 2], max_new_tokens=-3), ValueError, "max_new_tokens"),
        (dict(inputs=[1, 2], max_length=500), ValueError, "positions"),
        (dict(inputs=[1], max_length=4, stop_token_ids=[999]), ValueError, "stop_token_ids"),
        (dict(inputs=[1], max_length=4, seed="x"), TypeError, "seed"),
    ],
)
def test_bad_inputs_raise_clear_errors(gpt2_lm, kwargs, error, match):
    with pytest.raises(error, match=match):
        gpt2_lm.generate(**kwargs)


@pytest.mark.parametrize(
    "sampler, error, match",
    [
        ("nucleus", ValueError, "Unknown sampler"),
        (samplers.TopKSampler, TypeError, "sampler"),
    ],
)
def test_bad_sampler_raises(gpt2_lm, sampler, error, match):
    with pytest.raises(error, match=match):
        gpt2_lm.compile(sampler=sampler)


def test_sampler_values_checked_again_at_generate(gpt2_lm):
    gpt2_lm.compile(sampler="top_k")
    gpt2_lm.sampler.k = 0
    with pytest.raises(ValueError, match="`k` must be >= 1"):
        gpt2_lm.generate([1, 2], max_new_tokens=2)


def test_saving_round_trip(gpt2_lm, tmp_path):
    path = str(tmp_path / "lm.keras")
    gpt2_lm.save(path)
    restored = keras.saving.load_model(path)
    assert isinstance(restored, CausalLM)
    assert restored.generate(PROMPTS, max_new_tokens=5) == gpt2_lm.generate(
        PROMPTS, max_new_tokens=5
    )
