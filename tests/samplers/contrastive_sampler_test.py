import numpy as np
import pytest
from keras import ops

from keras_gen import backend
from keras_gen import samplers
from keras_gen.models import GPT2CausalLM
from keras_gen.samplers import ContrastiveSampler
from tests.conftest import tiny_gpt2_backbone
from tests.markers import ON_TORCH_ONLY

RAGGED = [[5, 9, 2, 33], [7, 1, 40, 22, 3, 8, 11], [60]]


def test_penalises_repeating_the_context():
    # A fake model: every step prefers token 1 a little over 2, and a
    # token's hidden state is its one-hot vector. Token 1 is picked once;
    # then its similarity to itself (1 vs 0) makes 2 win; then both have
    # been seen and probability decides again.
    logits = ops.convert_to_tensor([[0.0, 3.0, 2.9, -5.0]])
    embeddings = ops.eye(4)

    def next(prompt, state, index):
        last = backend.slice(prompt, index - 1, 1, axis=1)[:, 0]
        batch = ops.shape(prompt)[0]
        return ops.tile(logits, (batch, 1)), ops.take(embeddings, last, 0), state

    prompt = np.zeros((1, 5), "int32")
    hidden = ops.take(embeddings, prompt[:, :1], axis=0)
    for alpha, expected in [(0.6, [0, 1, 2, 1, 1]), (0.0, [0, 1, 1, 1, 1])]:
        sampler = ContrastiveSampler(k=2, alpha=alpha)
        tokens = sampler(next, prompt, ops.zeros((1, 1)), 1, hidden_states=hidden)
        assert ops.convert_to_numpy(tokens).tolist() == [expected]


# A plain reference: no cache, the whole sequence re-run for every
# candidate.
def run(backbone, tokens):
    hidden = backbone(np.array([tokens], "int32"))
    logits = backbone.compute_logits(hidden)
    return ops.convert_to_numpy(hidden)[0], ops.convert_to_numpy(logits)[0]


def reference_contrastive(backbone, prompt, max_new_tokens, k, alpha):
    tokens = list(prompt)
    for _ in range(max_new_tokens):
        hidden, logits = run(backbone, tokens)
        probabilities = np.exp(logits[-1] - logits[-1].max())
        probabilities /= probabilities.sum()
        candidates = np.argsort(-probabilities, kind="stable")[:k]
        context = hidden / np.linalg.norm(hidden, axis=-1, keepdims=True)
        scores = []
        for candidate in candidates:
            candidate_hidden = run(backbone, tokens + [int(candidate)])[0][-1]
            similarity = context @ (candidate_hidden / np.linalg.norm(candidate_hidden))
            scores.append(
                (1 - alpha) * probabilities[candidate] - alpha * similarity.max()
            )
        tokens.append(int(candidates[int(np.argmax(scores))]))
    return tokens


@pytest.fixture(scope="module")
def contrastive_lm():
    lm = GPT2CausalLM(tiny_gpt2_backbone())
    lm.compile(sampler=ContrastiveSampler(k=4, alpha=0.6))
    return lm


@ON_TORCH_ONLY
@pytest.mark.parametrize("alpha", [0.6, 1.0])
def test_matches_no_cache_reference(contrastive_lm, alpha):
    contrastive_lm.sampler.alpha = alpha  # a tunable number: same program
    outputs = contrastive_lm.generate(RAGGED, max_new_tokens=8, stop_token_ids=None)
    backbone = contrastive_lm.backbone
    assert outputs == [
        reference_contrastive(backbone, prompt, 8, 4, alpha) for prompt in RAGGED
    ]


def test_alpha_zero_is_greedy(contrastive_lm):
    contrastive_lm.sampler.alpha = 0.0
    outputs = contrastive_lm.generate(RAGGED, max_new_tokens=8, stop_token_ids=None)
    greedy = GPT2CausalLM(contrastive_lm.backbone)
    assert outputs == greedy.generate(RAGGED, max_new_tokens=8, stop_token_ids=None)


def test_stop_token_ends_a_row(contrastive_lm):
    contrastive_lm.sampler.alpha = 0.6
    unstopped = contrastive_lm.generate(RAGGED, max_new_tokens=8, stop_token_ids=None)
    stop = unstopped[0][len(RAGGED[0]) + 2]
    stopped = contrastive_lm.generate(RAGGED, max_new_tokens=8, stop_token_ids=[stop])
    for row, full in zip(stopped, unstopped):
        assert full[: len(row)] == row
    first_stop = unstopped[0].index(stop, len(RAGGED[0]))
    assert stopped[0] == unstopped[0][: first_stop + 1]


def test_scores_are_the_processed_tempered_logits(contrastive_lm):
    # transformers' contrastive search once returned the raw logits as its
    # scores; here scores show what processors and temperature did.
    contrastive_lm.sampler.alpha = 0.6
    prompt = [5, 9, 2, 33]
    result = contrastive_lm.generate(
        prompt,
        max_new_tokens=6,
        stop_token_ids=None,
        temperature=0.5,
        repetition_penalty=1.5,
        return_dict=True,
        output_scores=True,
        output_logits=True,
        output_log_probs=True,
    )
    tokens, logits, scores = result.token_ids[0], result.logits[0], result.scores[0]
    seen = list(prompt)
    for step, token in enumerate(tokens):
        expected = logits[step].copy()
        penalised = np.unique(seen)
        expected[penalised] = np.where(
            expected[penalised] > 0,
            expected[penalised] / 1.5,
            expected[penalised] * 1.5,
        )
        np.testing.assert_allclose(scores[step], expected / 0.5, rtol=1e-5, atol=1e-5)
        log_softmax = (
            scores[step]
            - np.log(np.exp(scores[step] - scores[step].max()).sum())
            - scores[step].max()
        )
        np.testing.assert_allclose(
            result.log_probs[0][step], log_softmax[token], atol=1e-5
        )
        seen.append(token)
    assert not np.allclose(scores, logits)


def test_no_recompilation(contrastive_lm, traces):
    sampler = contrastive_lm.sampler
    contrastive_lm.generate([1, 2, 3], max_length=20, stop_token_ids=None)
    first = traces()
    for prompts, max_length, alpha, temperature in [
        ([1, 2, 3, 4, 5, 6, 7, 8, 9], 30, 0.2, 0.5),
        ([4, 5, 6, 7, 8, 9, 10, 11, 12, 13], 24, 1.0, 2.0),
    ]:
        sampler.alpha, sampler.temperature = alpha, temperature
        contrastive_lm.generate(prompts, max_length=max_length, stop_token_ids=[3])
    sampler.alpha, sampler.temperature = 0.6, 1.0
    assert traces() == first


def test_registry_and_config():
    sampler = samplers.get("contrastive")
    assert isinstance(sampler, ContrastiveSampler)
    assert (sampler.k, sampler.alpha) == (5, 0.6)
    clone = samplers.get(samplers.serialize(ContrastiveSampler(k=3, alpha=0.2)))
    assert (clone.k, clone.alpha) == (3, 0.2)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"k": 0}, ValueError, "`k`"),
        ({"k": 1.5}, TypeError, "`k`"),
        ({"alpha": 1.5}, ValueError, r"\[0, 1\]"),
        ({"alpha": -0.1}, ValueError, r"\[0, 1\]"),
        ({"alpha": "high"}, TypeError, "alpha"),
        ({"temperature": -1.0}, ValueError, "temperature"),
    ],
)
def test_errors(kwargs, error, match):
    with pytest.raises(error, match=match):
        ContrastiveSampler(**kwargs)


def test_needs_hidden_states():
    sampler = ContrastiveSampler()
    with pytest.raises(ValueError, match="hidden_states"):
        sampler.start(np.zeros((1, 4), "int32"), None, 1)
