"""Speculative decoding: greedy output unchanged, sampling keeps the target's
distribution, rows advance on their own, no retracing."""

import types

import numpy as np
import pytest
from keras import ops
from scipy import stats

from keras_gen import processors
from keras_gen import samplers
from keras_gen.generation import generate_loop
from keras_gen.models import GPT2CausalLM
from keras_gen.models import LlamaBackbone
from keras_gen.models import LlamaCausalLM
from keras_gen.samplers.speculative_decoding import prompt_lookup
from keras_gen.streaming import GenerationOutput
from tests.conftest import set_numpy_weights
from tests.conftest import tiny_gpt2_backbone
from tests.markers import ON_TORCH_ONLY

PROMPTS = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11], [9], [5, 6, 5, 6, 5]]


@pytest.fixture
def target():
    return GPT2CausalLM(tiny_gpt2_backbone())


@pytest.fixture
def draft():
    # A smaller model of the same vocabulary that agrees with the target
    # often but not always: the target's first layer.
    target = tiny_gpt2_backbone()
    backbone = tiny_gpt2_backbone(num_layers=1)
    sources = {v.path.split("/", 1)[1]: v for v in target.weights}
    for variable in backbone.weights:
        variable.assign(sources[variable.path.split("/", 1)[1]])
    return GPT2CausalLM(backbone)


def assisted_settings(target, draft):
    return {
        "self": dict(draft_model=target, num_speculative_tokens=3),
        "draft": dict(draft_model=draft, num_speculative_tokens=4),
        "lookup": dict(prompt_lookup_ngram=2, num_speculative_tokens=3),
    }


@pytest.mark.parametrize("setting", ["self", "draft", "lookup"])
def test_greedy_equals_plain_greedy_on_ragged_batches(target, draft, setting):
    kwargs = assisted_settings(target, draft)[setting]
    plain = target.generate(PROMPTS, max_new_tokens=17, stop_token_ids=None)
    assisted = target.generate(
        PROMPTS, max_new_tokens=17, stop_token_ids=None, **kwargs
    )
    assert assisted == plain


@pytest.mark.only_backend("jax", "torch")
@pytest.mark.parametrize("setting", ["draft", "lookup"])
def test_a_long_cache_decodes_in_growing_spans(setting, torch_compiled):
    # A cache of 1024 (and the lookahead): rows verify over its first 256
    # positions while every running row's drafts fit there, then 512, then
    # all of them, as a plain sampler's loops do.
    target = GPT2CausalLM(tiny_gpt2_backbone(max_sequence_length=1024))
    draft = GPT2CausalLM(tiny_gpt2_backbone(max_sequence_length=1024, num_layers=1))
    kwargs = dict(num_speculative_tokens=3)
    if setting == "draft":
        kwargs["draft_model"] = draft
    else:
        kwargs["prompt_lookup_ngram"] = 2
    lookahead = types.SimpleNamespace(lookahead=4)  # 3 drafts and the token after
    assert generate_loop.attention_spans(1024, 128, lookahead) == (256, 512, 1028)
    prompts = [[5] * 40, [3, 9] * 60]
    plain = target.generate(prompts, max_length=600, stop_token_ids=None)
    assisted = target.generate(prompts, max_length=600, stop_token_ids=None, **kwargs)
    assert assisted == plain


@pytest.mark.only_backend("jax", "torch")
def test_compiled_draft_equals_plain_with_stops_and_processors(target, draft):
    chain = [processors.RepetitionPenalty(1.5), processors.NoRepeatNGram(3)]
    kwargs = dict(
        max_new_tokens=15,
        stop_token_ids=[7, 30],
        stop_sequences=[[12, 12]],
        processors=chain,
        return_dict=True,
    )
    plain = target.generate(PROMPTS, **kwargs)
    target.compile(sampler="greedy", draft_model=draft, num_speculative_tokens=3)
    assisted = target.generate(PROMPTS, **kwargs)
    assert assisted.token_ids == plain.token_ids
    assert assisted.finish_reasons == plain.finish_reasons


@pytest.mark.only_backend("jax", "torch")  # TensorFlow: 53 s of compiles
def test_llama_greedy_with_rotary_per_row_positions():
    def llama(num_layers, seed=0):
        backbone = LlamaBackbone(
            vocabulary_size=64,
            num_layers=num_layers,
            num_query_heads=4,
            num_key_value_heads=2,
            hidden_dim=16,
            intermediate_dim=32,
            sliding_window=6,
        )
        return LlamaCausalLM(set_numpy_weights(backbone, seed))

    target, draft = llama(2), llama(1, seed=1)
    plain = target.generate(PROMPTS, max_new_tokens=12, stop_token_ids=None)
    assisted = target.generate(
        PROMPTS, max_new_tokens=12, stop_token_ids=None, draft_model=draft
    )
    assert assisted == plain


@ON_TORCH_ONLY
def test_acceptance_counts_per_row(target, draft):
    record = target.generate(
        PROMPTS,
        max_new_tokens=20,
        stop_token_ids=None,
        return_dict=True,
        draft_model=target,
        num_speculative_tokens=4,
    )
    # Drafting for itself: every proposal is accepted, 5 tokens a step.
    assert record.accepted_tokens == record.draft_tokens == [16] * 4
    record = target.generate(
        PROMPTS,
        max_new_tokens=20,
        stop_token_ids=None,
        return_dict=True,
        prompt_lookup_ngram=2,
    )
    assert all(a <= d for a, d in zip(record.accepted_tokens, record.draft_tokens))
    # Rows accept different numbers, so they take different step counts.
    assert len(set(record.draft_tokens)) > 1


@ON_TORCH_ONLY
def test_stream_yields_verified_tokens_and_joins_to_generate(target, draft):
    kwargs = dict(
        max_new_tokens=14,
        stop_token_ids=[7],
        draft_model=draft,
        num_speculative_tokens=3,
        output_scores=True,
        output_log_probs=True,
    )
    chunks = list(target.stream(PROMPTS, stream_chunk_size=1, **kwargs))
    final = target.generate(PROMPTS, return_dict=True, **kwargs)
    joined = GenerationOutput.join(chunks)
    assert joined.token_ids == final.token_ids
    assert joined.finish_reasons == final.finish_reasons
    assert joined.accepted_tokens == final.accepted_tokens
    for name in ("scores", "log_probs"):
        for a, b in zip(getattr(joined, name), getattr(final, name)):
            np.testing.assert_allclose(a, b, atol=1e-5)
    # One step per chunk yields 1 to K + 1 tokens per running row.
    sizes = [len(ids) for chunk in chunks for ids in chunk.token_ids]
    assert 1 < max(sizes) <= 4


@ON_TORCH_ONLY
def test_per_step_outputs_equal_plain_greedy(target):
    kwargs = dict(
        max_new_tokens=9,
        stop_token_ids=None,
        return_dict=True,
        output_scores=True,
        output_logits=True,
        output_log_probs=True,
        output_hidden_states=True,
    )
    plain = target.generate(PROMPTS, **kwargs)
    assisted = target.generate(PROMPTS, prompt_lookup_ngram=1, **kwargs)
    for name in ("scores", "logits", "log_probs", "hidden_states"):
        for a, b in zip(getattr(assisted, name), getattr(plain, name)):
            np.testing.assert_allclose(a, b, atol=1e-4, err_msg=name)


def test_no_retracing_within_a_length_bucket(target, draft, traces):
    target.compile(sampler="top_k", draft_model=draft, num_speculative_tokens=3)
    target.generate([[1, 2, 3], [4, 5]], max_length=20, seed=1)
    assert traces() == 1
    target.generate([[1, 2, 3, 4, 5, 6, 7], [4]], max_length=25, seed=2)
    target.sampler.sampler.k = 3
    target.sampler.sampler.temperature = 0.5
    target.generate([[9], [4, 5, 6, 7, 8]], max_new_tokens=12, seed=3)
    assert traces() == 1


def test_prompt_lookup_proposes_what_followed_the_last_ngram():
    token_ids = np.array(
        [[1, 2, 3, 4, 1, 2, 0, 0], [7, 8, 7, 8, 7, 8, 0, 0], [5, 6, 0, 0, 0, 0, 0, 0]],
        "int32",
    )
    lengths = np.array([6, 6, 2], "int32")
    drafts, found = prompt_lookup(
        ops.convert_to_tensor(token_ids), ops.convert_to_tensor(lengths), 2, 4
    )
    # Row 0 continues "3 4 1 2"; row 1 repeats with period 2; row 2 has no
    # match and repeats its last token.
    assert ops.convert_to_numpy(drafts).tolist() == [
        [3, 4, 1, 2],
        [7, 8, 7, 8],
        [6, 6, 6, 6],
    ]
    assert ops.convert_to_numpy(found).tolist() == [True, True, False]
    # Each row its own size: row 0 matches its last token ("2", after
    # "1"), row 1 its last three.
    drafts, found = prompt_lookup(
        ops.convert_to_tensor(token_ids),
        ops.convert_to_tensor(lengths),
        3,
        2,
        ops.convert_to_tensor(np.array([1, 3, 2], "int32")),
    )
    assert ops.convert_to_numpy(drafts).tolist() == [[3, 4], [7, 8], [6, 6]]
    assert ops.convert_to_numpy(found).tolist() == [True, True, False]


class StepOverridingSampler(samplers.Sampler):
    def step(self, next, loop):
        return loop


def test_clear_errors(target):
    other = GPT2CausalLM(tiny_gpt2_backbone(vocabulary_size=80))
    with pytest.raises(ValueError, match="vocabulary"):
        target.compile(draft_model=other)
    with pytest.raises(ValueError, match="own loop step"):
        target.compile(sampler=StepOverridingSampler(), draft_model=target)
    with pytest.raises(ValueError, match="needs `draft_model`"):
        target.generate([1, 2], max_new_tokens=2, num_speculative_tokens=2)
    with pytest.raises(ValueError, match="exactly one"):
        target.generate(
            [1, 2], max_new_tokens=2, draft_model=target, prompt_lookup_ngram=2
        )
    with pytest.raises(ValueError, match="num_speculative_tokens"):
        target.generate(
            [1, 2], max_new_tokens=2, prompt_lookup_ngram=2, num_speculative_tokens=0
        )


# --- sampling keeps the target's distribution --------------------------------

SMALL_VOCAB = 8
PROMPT = [1, 2, 1]  # prompt lookup matches its last token


def exact_two_token_distribution(lm, sampler):
    """`(vocab, vocab)` probabilities of the first two new tokens, from the
    model's full-sequence logits under the sampler's temperature and filter."""

    def next_probabilities(sequences):
        logits = lm(ops.convert_to_tensor(np.asarray(sequences, "int32")))
        scores = ops.cast(logits[:, -1], "float32") / sampler.temperature
        filtered = sampler.filter_logits(scores)
        return ops.convert_to_numpy(ops.softmax(filtered, axis=-1)).astype("float64")

    first = next_probabilities([PROMPT])[0]
    second = next_probabilities([PROMPT + [t] for t in range(SMALL_VOCAB)])
    return first[:, None] * second


@pytest.mark.only_backend("jax", "torch")
@pytest.mark.parametrize(
    "sampler, setting",
    [
        (samplers.RandomSampler(temperature=1.5), "draft"),
        (samplers.TopKSampler(k=5, temperature=2.0), "draft"),
        (samplers.MinPSampler(p=0.05, temperature=1.5), "lookup"),
    ],
)
def test_sampling_matches_the_target_distribution(sampler, setting):
    # Small weights and a small vocabulary: spread-out distributions that
    # the draft (another random model) matches only partly.
    target = GPT2CausalLM(
        set_numpy_weights(tiny_gpt2_backbone(vocabulary_size=SMALL_VOCAB), 0, scale=0.3)
    )
    draft = GPT2CausalLM(
        set_numpy_weights(
            tiny_gpt2_backbone(vocabulary_size=SMALL_VOCAB, num_layers=1), 1, scale=0.3
        )
    )
    kwargs = {
        "draft": dict(draft_model=draft, num_speculative_tokens=2),
        "lookup": dict(prompt_lookup_ngram=1, num_speculative_tokens=2),
    }[setting]
    target.compile(sampler=sampler, **kwargs)
    runs = 3000
    record = target.generate(
        [PROMPT] * runs,
        max_new_tokens=2,
        stop_token_ids=None,
        seed=1234,
        return_dict=True,
    )
    assert 0 < sum(record.accepted_tokens) < sum(record.draft_tokens)
    observed = np.zeros((SMALL_VOCAB, SMALL_VOCAB))
    for first, second in record.token_ids:
        observed[first, second] += 1
    expected = exact_two_token_distribution(target, sampler).ravel() * runs
    observed = observed.ravel()
    assert observed[expected == 0].sum() == 0  # filtered tokens never appear
    # Pool the rare cells so that every cell expects at least 5.
    rare = expected < 5
    observed = np.append(observed[~rare], observed[rare].sum())
    expected = np.append(expected[~rare], expected[rare].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    _, p_value = stats.chisquare(observed, expected * observed.sum() / expected.sum())
    assert p_value > 1e-3


@ON_TORCH_ONLY
def test_stop_strings_end_rows_as_in_plain_greedy():
    from tests.streaming.fake_tokenizer import ByteTokenizer

    backbone = tiny_gpt2_backbone(vocabulary_size=256)
    lm = GPT2CausalLM(backbone, tokenizer=ByteTokenizer())
    prompts = ["ab", "hello wo", "x"]
    plain = lm.generate(prompts, max_new_tokens=12, return_dict=True)
    # Stop at a two-byte string that plain greedy produces in some row.
    text = next(t for t in plain.text if len(t.encode()) >= 4)
    stop = text.encode()[2:4].decode("utf-8", errors="ignore") or text[:1]
    kwargs = dict(max_new_tokens=12, return_dict=True, stop_strings=[stop])
    plain = lm.generate(prompts, **kwargs)
    assisted = lm.generate(prompts, prompt_lookup_ngram=1, **kwargs)
    assert "stop" in plain.finish_reasons
    assert assisted.token_ids == plain.token_ids
    assert assisted.text == plain.text
    assert assisted.finish_reasons == plain.finish_reasons
