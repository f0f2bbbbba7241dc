import numpy as np
import pytest
from keras import ops

from keras_gen import GenerationConfig
from keras_gen import processors
from keras_gen import samplers
from keras_gen.generation import options


def test_modes_pick_samplers():
    build = lambda **o: options.build_sampler(GenerationConfig(**o))  # noqa: E731
    assert type(build()) is samplers.GreedySampler
    assert type(build(do_sample=True, temperature=0)) is samplers.GreedySampler
    assert type(build(num_beams=3, num_return_sequences=2)) is samplers.BeamSampler
    contrastive = build(penalty_alpha=0.6)
    assert type(contrastive) is samplers.ContrastiveSampler and contrastive.k == 4
    sampled = build(temperature=0.7, top_k=40, top_p=1.0, min_p=0.1)
    assert type(sampled) is samplers.RandomSampler
    # Neutral filters are left out of the program...
    assert sampled.get_parameters() == {"temperature": 0.7, "top_k": 40, "min_p": 0.1}
    # ... unless every request must share it.
    complete = options.build_sampler(GenerationConfig(temperature=0.7), complete=True)
    assert complete.get_parameters() == {
        "temperature": 0.7,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
        "typical_p": 1.0,
        "top_n_sigma": 0.0,
    }


def test_processors_in_vllm_order():
    config = GenerationConfig(
        presence_penalty=0.5,
        repetition_penalty=1.2,
        frequency_penalty=0.1,
        logit_bias={3: 1.0},
        min_new_tokens=2,
        bad_words_ids=[[4, 5]],
        suppress_tokens=[6],
        no_repeat_ngram_size=3,
        forced_eos_token_id=0,
    )
    assert [type(p) for p in options.build_processors(config)] == [
        processors.BadWords,
        processors.SuppressTokens,
        processors.MinLength,
        processors.LogitBias,
        processors.RepetitionPenalty,
        processors.FrequencyPenalty,
        processors.PresencePenalty,
        processors.NoRepeatNGram,
        processors.ForcedEOS,
    ]
    neutral = GenerationConfig(repetition_penalty=1.0, presence_penalty=0.0)
    assert options.build_processors(neutral) == []
    assert len(options.build_processors(neutral, complete=True)) == 3


@pytest.mark.parametrize(
    "sampler",
    [
        samplers.GreedySampler(),
        samplers.RandomSampler(temperature=0.5, top_p=0.8),
        samplers.TopKSampler(k=7, temperature=0.3),
        samplers.TopPSampler(p=0.6, k=9),
        samplers.MinPSampler(p=0.2, temperature=2.0),
        samplers.BeamSampler(num_beams=3, length_penalty=0.5, num_return_sequences=2),
        samplers.ContrastiveSampler(k=3, alpha=0.4),
    ],
)
def test_a_built_in_sampler_is_its_options(sampler):
    config = GenerationConfig(**options.sampler_options(sampler))
    rebuilt = options.build_sampler(config)
    assert config.temperature == sampler.temperature
    if isinstance(sampler, samplers.RandomSampler) or not sampler.deterministic:
        # The general sampler, with the same filters.
        logits = ops.convert_to_tensor(
            np.random.default_rng(0).standard_normal((4, 30)).astype("float32")
        )
        bound = sampler.with_parameters(sampler.get_parameter_tensors())
        expected = ops.convert_to_numpy(bound.filter_logits(logits))
        bound = rebuilt.with_parameters(rebuilt.get_parameter_tensors())
        ours = ops.convert_to_numpy(bound.filter_logits(logits))
        np.testing.assert_array_equal(np.isfinite(ours), np.isfinite(expected))
        assert type(rebuilt) is samplers.RandomSampler
    else:
        assert rebuilt.get_structure() == sampler.get_structure()
        assert rebuilt.get_parameters() == sampler.get_parameters()


def test_a_call_adjusts_a_compiled_sampler():
    base = GenerationConfig(do_sample=True, top_k=40, repetition_penalty=1.2)
    compiled = samplers.TopKSampler(k=3, temperature=0.5)
    config, sampler, chain = options.resolve(
        base, GenerationConfig(temperature=1.5), compiled, None
    )
    # The compiled sampler replaced the model's sampling options.
    assert sampler.get_parameters() == {"temperature": 1.5, "top_k": 3}
    assert [type(p) for p in chain] == [processors.RepetitionPenalty]
    _, same, _ = options.resolve(base, GenerationConfig(seed=3), compiled, None)
    assert same is compiled


def test_a_custom_sampler_cannot_take_sampling_options():
    class ArgmaxSampler(samplers.Sampler):
        def get_next_token(self, logits, seed):
            return logits.argmax(-1)

    custom = ArgmaxSampler()
    _, sampler, _ = options.resolve(
        GenerationConfig(), GenerationConfig(seed=1), custom
    )
    assert sampler is custom
    with pytest.raises(ValueError, match="not a built-in sampler.*temperature"):
        options.resolve(GenerationConfig(), GenerationConfig(temperature=0.5), custom)


def test_call_processor_options_replace_or_join_a_chain():
    chain = (processors.NoRepeatNGram(2), processors.RepetitionPenalty(1.5))
    call = GenerationConfig(repetition_penalty=1.1, presence_penalty=0.3)
    _, _, adjusted = options.resolve(GenerationConfig(), call, None, chain)
    assert [type(p) for p in adjusted] == [
        processors.NoRepeatNGram,
        processors.RepetitionPenalty,
        processors.PresencePenalty,
    ]
    assert adjusted[1].penalty == 1.1
    _, _, removed = options.resolve(
        GenerationConfig(), GenerationConfig(repetition_penalty=1.0), None, chain
    )
    assert [type(p) for p in removed] == [processors.NoRepeatNGram]
