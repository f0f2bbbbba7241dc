import keras
import numpy as np
import pytest
from keras import ops

import keras_gen
from keras_gen import processors
from keras_gen import samplers
from keras_gen.generation import generate_loop
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


@pytest.mark.only_backend("jax", "torch")
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


@pytest.mark.only_backend("jax", "torch")
@pytest.mark.parametrize("quantize_activations", [False, True])
def test_int8_quantization_keeps_greedy_tokens_close(gpt2_lm, quantize_activations):
    kwargs = dict(max_new_tokens=12, return_dict=True, output_log_probs=True)
    reference = gpt2_lm.generate(PROMPTS, **kwargs)
    gpt2_lm.quantize("int8", quantize_activations=quantize_activations)
    assert gpt2_lm.generate_function is None
    assert "int8" in {v.dtype for v in gpt2_lm.backbone.weights}
    # Every kernel is int8; activations are quantized unless asked not to.
    block = gpt2_lm.backbone.transformer_layers[0]
    for dense in (block.c_attn, block.c_proj, block.c_fc, block.mlp_c_proj):
        assert dense.quantization_mode == "int8"
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
        (
            dict(inputs=[1], max_length=4, stop_token_ids=[999]),
            ValueError,
            "stop_token_ids",
        ),
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


# --- programs found by structure ---------------------------------------------


def _random_call(rng):
    """A new sampler and processor chain of fixed structure, new numbers."""
    sampler = samplers.TopKSampler(
        k=int(rng.integers(1, 60)), temperature=float(rng.uniform(0.2, 2.0))
    )
    chain = [
        processors.RepetitionPenalty(float(rng.uniform(1.0, 2.0))),
        processors.PresencePenalty(float(rng.uniform(-1.0, 1.0))),
    ]
    return sampler, chain


@pytest.mark.parametrize("how", ["compile", "assignment", "stream"])
def test_new_sampler_objects_never_compile_again(gpt2_lm, compiles, how):
    rng = np.random.default_rng(0)
    counts = []
    for i in range(20):
        sampler, chain = _random_call(rng)
        if how == "compile":
            gpt2_lm.compile(sampler=sampler, processors=chain)
            gpt2_lm.generate(PROMPTS, max_new_tokens=6, seed=i)
        elif how == "assignment":
            gpt2_lm.sampler = sampler
            gpt2_lm.generate(PROMPTS, max_new_tokens=6, seed=i, processors=chain)
        else:
            gpt2_lm.sampler = sampler
            for _ in gpt2_lm.stream(PROMPTS, max_new_tokens=6, processors=chain):
                pass
        counts.append(compiles())
    assert counts[0] > 0
    assert counts[-1] == counts[0], counts


def test_new_numbers_change_the_tokens_of_the_shared_program(gpt2_lm):
    # The program built for the first sampler reads the second's numbers.
    gpt2_lm.compile(sampler=samplers.TopKSampler(k=30, temperature=1.5))
    hot = gpt2_lm.generate(PROMPTS, max_new_tokens=8, seed=5)
    gpt2_lm.compile(sampler=samplers.TopKSampler(k=1))
    assert gpt2_lm.generate(PROMPTS, max_new_tokens=8, seed=5) == (
        GPT2CausalLM(gpt2_lm.backbone).generate(PROMPTS, max_new_tokens=8)
    )
    assert hot != gpt2_lm.generate(PROMPTS, max_new_tokens=8, seed=5)


@pytest.mark.only_backend("jax")
def test_the_program_cache_is_bounded(gpt2_lm):
    gpt2_lm.programs.max_size = 2
    for sampler in ("greedy", "top_k", "top_p", "min_p"):
        gpt2_lm.generate([1, 2], max_new_tokens=2, sampler=sampler)
        assert len(gpt2_lm.programs) <= 2
    # The most recent ones stay.
    kinds = [key[2][0].__name__ for key in gpt2_lm.programs.keys()]
    assert kinds == ["TopPSampler", "MinPSampler"]


@pytest.mark.only_backend("jax")
def test_quantize_drops_the_programs(gpt2_lm):
    gpt2_lm.generate([1, 2], max_new_tokens=2)
    assert len(gpt2_lm.programs)
    gpt2_lm.quantize("int8")
    assert not len(gpt2_lm.programs)


# --- options and where they come from ----------------------------------------

SAMPLED = dict(do_sample=True, top_k=5, temperature=0.9, repetition_penalty=1.3)


@pytest.fixture
def configured_lm(gpt2_backbone):
    """A model whose `generation_config` samples, as a checkpoint's may."""
    return GPT2CausalLM(
        gpt2_backbone, generation_config=dict(SAMPLED, max_new_tokens=7)
    )


def _compiled_like_config(backbone, **compile_kwargs):
    lm = GPT2CausalLM(backbone)
    lm.compile(
        sampler=samplers.TopKSampler(k=5, temperature=0.9),
        processors=[processors.RepetitionPenalty(1.3)],
        **compile_kwargs,
    )
    return lm


def test_the_model_generation_config_is_the_default(configured_lm, gpt2_backbone):
    reference = _compiled_like_config(gpt2_backbone)
    ours = configured_lm.generate(PROMPTS, seed=4)
    assert ours == reference.generate(PROMPTS, max_new_tokens=7, seed=4)
    assert [len(r) - len(p) for r, p in zip(ours, PROMPTS)] == [7, 7, 7]
    assert ours != configured_lm.generate(PROMPTS, seed=5)


# Which option wins is host-side logic: one backend.
@pytest.mark.only_backend("jax")
def test_precedence(configured_lm, gpt2_backbone):
    greedy = GPT2CausalLM(gpt2_backbone).generate(PROMPTS, max_new_tokens=7)
    penalized_greedy = GPT2CausalLM(gpt2_backbone).generate(
        PROMPTS, max_new_tokens=7, processors=[processors.RepetitionPenalty(1.3)]
    )
    lm = configured_lm
    # Call keywords > the model's options.
    assert lm.generate(PROMPTS, do_sample=False) == penalized_greedy
    assert lm.generate(PROMPTS, temperature=0, repetition_penalty=1.0) == greedy
    # The generation_config argument > the model's options; keywords > it.
    config = keras_gen.GenerationConfig(do_sample=False, repetition_penalty=1.0)
    assert lm.generate(PROMPTS, config) == greedy
    assert lm.generate(PROMPTS, config, repetition_penalty=1.3) == penalized_greedy
    # compile(sampler=...) > the model's sampling options (its penalty stays).
    lm.compile(sampler="greedy")
    assert lm.generate(PROMPTS) == penalized_greedy
    # compile(processors=...) > the model's processor options.
    lm.compile(sampler="greedy", processors=[])
    assert lm.generate(PROMPTS) == greedy
    # A call's numbers adjust a compiled sampler; its filters stay.
    lm.compile(sampler=samplers.TopKSampler(k=1, temperature=0.5))
    assert lm.generate(PROMPTS, temperature=1.7, seed=3) == penalized_greedy
    # A call's penalty replaces the compiled one.
    lm.compile(sampler="greedy", processors=[processors.RepetitionPenalty(1.3)])
    assert lm.generate(PROMPTS, repetition_penalty=1.0) == greedy


def test_filters_given_together_all_apply(gpt2_lm):
    options = dict(max_new_tokens=10, return_dict=True, output_scores=True)
    record = gpt2_lm.generate(
        PROMPTS,
        do_sample=True,
        top_k=6,
        top_p=0.6,
        min_p=0.2,
        temperature=0.8,
        seed=1,
        **options,
    )
    chained = GPT2CausalLM(gpt2_lm.backbone).generate(
        PROMPTS,
        sampler=samplers.RandomSampler(temperature=0.8),
        processors=[],
        seed=1,
        **options,
    )
    assert record.token_ids != chained.token_ids
    for scores, tokens in zip(record.scores, record.token_ids):
        probabilities = np.exp(scores - scores.max(-1, keepdims=True))
        probabilities /= probabilities.sum(-1, keepdims=True)
        for step, token in enumerate(tokens):
            p = probabilities[step]
            # min-p, then top-k, then top-p of what they kept.
            kept = np.flatnonzero(p >= 0.2 * p.max())
            kept = kept[np.argsort(-p[kept], kind="stable")][:6]
            q = p[kept] / p[kept].sum()
            ascending = np.sort(q)
            removed = min(int(np.sum(np.cumsum(ascending) <= 1 - 0.6)), len(q) - 1)
            assert token in kept[q >= ascending[removed]]


def test_num_return_sequences_samples_each_prompt_n_times(gpt2_lm):
    rows = gpt2_lm.generate(
        PROMPTS[:2], max_new_tokens=6, do_sample=True, num_return_sequences=3, seed=0
    )
    assert [len(r) for r in rows] == [3, 3]
    assert all(row[: len(p)] == p for group, p in zip(rows, PROMPTS) for row in group)
    assert len({tuple(r) for r in rows[0]}) > 1
    with pytest.raises(ValueError, match="num_return_sequences"):
        gpt2_lm.generate(PROMPTS, max_new_tokens=2, num_return_sequences=2)


def test_generation_config_saving_round_trips(configured_lm, tmp_path):
    path = str(tmp_path / "lm.keras")
    configured_lm.save(path)
    restored = keras.saving.load_model(path)
    assert restored.generation_config == configured_lm.generation_config


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(temperatur=0.5), TypeError, "temperatur"),
        (dict(stop_token_ids="eos"), TypeError, "stop_token_ids"),
        (dict(generation_config=7), TypeError, "generation_config"),
        (dict(draft_model="nonsense"), TypeError, "draft_model"),
        (
            dict(temperature=1e-40, do_sample=True, top_k=3, top_p=1.5),
            ValueError,
            "top_p",
        ),
        (dict(logit_bias={70: 1.0}), ValueError, "vocabulary"),
        (dict(sampler="nucleus"), ValueError, "Unknown sampler"),
    ],
)
def test_bad_options_raise_clear_errors(gpt2_lm, kwargs, error, match):
    with pytest.raises(error, match=match):
        gpt2_lm.generate([1, 2], max_new_tokens=2, **kwargs)


def test_compile_refuses_a_draft_that_is_not_a_model(gpt2_lm):
    with pytest.raises(TypeError, match="draft_model"):
        gpt2_lm.compile(draft_model="nonsense")


def test_tiny_temperatures_decode_greedily_and_samplers_refuse_them(gpt2_lm):
    greedy = gpt2_lm.generate(PROMPTS, max_new_tokens=8)
    record = gpt2_lm.generate(
        PROMPTS,
        max_new_tokens=8,
        do_sample=True,
        temperature=1e-40,
        seed=0,
        return_dict=True,
        output_log_probs=True,
    )
    assert [p + t for p, t in zip(PROMPTS, record.token_ids)] == greedy
    assert all(np.isfinite(lp).all() for lp in record.log_probs)
    with pytest.raises(ValueError, match="temperature"):
        samplers.TopKSampler(k=1, temperature=1e-40)
    with pytest.raises(ValueError, match="temperature"):
        samplers.TopKSampler(k=1, temperature=float("inf"))


# Extreme values of every option, none neutral (so that every trial runs
# the same processors and filters: one program, two with greedy).
EXTREMES = {
    "temperature": [0.0, 1e-5, 0.3, 50.0],
    "top_k": [1, 3, 1000],
    "top_p": [1e-6, 0.5, 0.999],
    "min_p": [1e-6, 0.5, 1.0],
    "typical_p": [0.2, 0.999],
    "repetition_penalty": [0.01, 100.0],
    "presence_penalty": [-2.0, 2.0],
    "frequency_penalty": [-2.0, 2.0],
    "no_repeat_ngram_size": [1, 2],
    "logit_bias": [{3: float("-inf")}, {5: 1e9}, {7: -1e9}],
    "suppress_tokens": [list(range(63)), list(range(10, 60))],
    "bad_words_ids": [[[4]], [[1, 2]]],
    "min_new_tokens": [1, 5],
}


def test_no_accepted_option_combination_gives_nan(gpt2_lm):
    rng = np.random.default_rng(1)
    for trial in range(12):
        options = {
            name: values[rng.integers(len(values))] for name, values in EXTREMES.items()
        }
        record = gpt2_lm.generate(
            PROMPTS,
            max_new_tokens=6,
            stop_token_ids=[0],
            seed=trial,
            return_dict=True,
            output_log_probs=True,
            output_scores=True,
            **options,
        )
        for log_probs, scores in zip(record.log_probs, record.scores):
            assert not np.isnan(log_probs).any(), options
            assert not np.isnan(scores).any() and not np.isposinf(scores).any(), options
        assert all(0 <= t < 64 for row in record.token_ids for t in row)


def test_a_row_with_every_token_banned_samples_from_the_model(gpt2_lm):
    # Documented: the step then ignores the processors for that row.
    everything = list(range(64))
    record = gpt2_lm.generate(
        [1, 2],
        max_new_tokens=4,
        suppress_tokens=everything,
        return_dict=True,
        output_log_probs=True,
    )
    assert record.token_ids[0] == gpt2_lm.generate([1, 2], max_new_tokens=4)[2:]
    assert np.isfinite(record.log_probs[0]).all()


def test_threads_sharing_a_program_each_get_their_own_numbers(gpt2_backbone):
    # Both threads trace (or, on torch, run) the same program at once; each
    # binds its own sampler's numbers.
    import threading

    lm = GPT2CausalLM(gpt2_backbone)
    greedy = GPT2CausalLM(gpt2_backbone).generate(PROMPTS, max_new_tokens=8)
    results, errors = {}, []

    def run(name, sampler):
        try:
            results[name] = [
                lm.generate(PROMPTS, max_new_tokens=8, sampler=sampler, seed=i)
                for i in range(3)
            ]
        except Exception as error:  # reported below
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=("cold", samplers.TopKSampler(k=1))),
        threading.Thread(
            target=run, args=("hot", samplers.TopKSampler(k=60, temperature=3.0))
        ),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert results["cold"] == [greedy] * 3
    assert any(rows != greedy for rows in results["hot"])


# TensorFlow runs the same spans code as JAX; torch compiles one step for
# every span (its length axis symbolic).
JAX_ONLY = pytest.mark.only_backend("jax")


@pytest.mark.only_backend("jax", "torch")
@pytest.mark.parametrize(
    "sampler, outputs",
    [
        ("greedy", ("log_probs", "scores")),
        (samplers.TopKSampler(k=5), ("hidden_states",)),
        pytest.param(samplers.BeamSampler(num_beams=2), ("log_probs",), marks=JAX_ONLY),
        pytest.param(samplers.ContrastiveSampler(k=3), (), marks=JAX_ONLY),
    ],
)
def test_a_long_cache_decodes_in_growing_spans_with_the_same_results(
    monkeypatch, sampler, outputs, traces, torch_compiled
):
    lm = GPT2CausalLM(tiny_gpt2_backbone(max_sequence_length=1024))
    # Ragged prompts generated to 600: a cache of 1024, decoded in spans
    # of 256 and 512, then the rest.
    prompts = [[5] * 40, [3, 9] * 60]
    options = dict(
        max_length=600,
        stop_token_ids=None,
        seed=3,
        sampler=sampler,
        return_dict=True,
        **{f"output_{name}": True for name in outputs},
    )
    greedy = samplers.GreedySampler()
    spans = generate_loop.attention_spans(1024, 128, greedy)
    assert spans == (256, 512, 1024)
    # A prompt beyond a span starts at the next.
    assert generate_loop.attention_spans(1024, 512, greedy) == (512, 1024)
    assert generate_loop.attention_spans(256, 32, greedy) == ()
    grown = lm.generate(prompts, **options)
    assert traces() == 1  # every span's loop in the one program (step)
    monkeypatch.setattr(generate_loop, "MIN_ATTENTION_SPAN", 4096)
    lm.clear_programs()
    whole = lm.generate(prompts, **options)
    assert grown.token_ids == whole.token_ids
    for name in outputs:
        for a, b in zip(getattr(grown, name), getattr(whole, name)):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
