"""Contrastive search."""

import keras
from keras import ops

from keras_gen import backend
from keras_gen.samplers.sampler import Sampler
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_fraction


class ContrastiveSampler(Sampler):
    """Contrastive search: likely tokens that do not repeat the context.

    Among the `k` most likely tokens, picks the one that maximises
    `(1 - alpha) * probability - alpha * max_similarity`, where
    `max_similarity` is the largest cosine similarity between the
    candidate's hidden state and the hidden state of any earlier position
    (prompt included). `alpha=0` is greedy decoding. Each step runs the
    model once for the batch and once for its `k` candidates per row; the
    hidden states of the context are kept in a fixed-shape buffer.

    Args:
        k: int >= 1, candidates per step. Sets the program's shapes.
        alpha: float in [0, 1], the weight of the degeneration penalty.
        temperature: float > 0, logits are divided by it before the softmax.
        seed: unused (contrastive search is deterministic); accepted like
            every sampler's.

    Call arguments:
        As `Sampler`; `hidden_states`, `(batch, prompt_length, hidden_dim)`,
        the prompt's final hidden states, is required.

    Examples:
    >>> sampler = ContrastiveSampler(k=4, alpha=0.6)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'alpha': 0.6}
    """

    deterministic = True
    # Its numbers are one for the whole search (it runs in `generate` only).
    per_row = False

    def __init__(self, k=5, alpha=0.6, temperature=1.0, seed=None):
        self.k = check_count("k", k)
        self.alpha = alpha
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        return {
            **super().get_parameters(),
            "alpha": check_fraction("alpha", self.alpha),
        }

    def start(
        self,
        prompt,
        state,
        index,
        mask=None,
        stop_token_ids=None,
        hidden_states=None,
        end=None,
        seed=None,
        **kwargs,
    ):
        """The base loop state; its `sampler_state` is the context's hidden
        states, `(batch, max_length, hidden_dim)`: the prompt's, padded."""
        if hidden_states is None:
            raise ValueError(
                "`ContrastiveSampler` compares candidates with the prompt's "
                "hidden states: pass `hidden_states`, (batch, prompt_length, "
                "hidden_dim), as `CausalLM.generate_step` does."
            )
        loop = super().start(
            prompt, state, index, mask, stop_token_ids, None, end, seed, **kwargs
        )
        padding = ops.shape(loop.token_ids)[1] - ops.shape(hidden_states)[1]
        context = ops.pad(hidden_states, [[0, 0], [0, padding], [0, 0]])
        return loop._replace(sampler_state=context)

    def step(self, next, loop):
        """Score the top `k` tokens of every row and append the best."""
        index, k = loop.index, self.k
        token_ids = loop.token_ids
        # Runs the token at `index - 1`: its hidden state joins the context.
        logits, hidden_states, state = next(token_ids, loop.state, index)
        context = loop.sampler_state
        context = backend.update_slice(
            context, ops.cast(hidden_states, context.dtype)[:, None], index - 1, 1
        )
        logits = ops.cast(logits, "float32")
        scores = self.process_logits(logits, loop) / self.temperature
        probabilities, candidates = ops.top_k(ops.softmax(scores, axis=-1), k)
        candidates = ops.cast(candidates, "int32")  # (batch, k)

        # Run every candidate at `index` on a copy of the row's cache.
        batch, length = ops.shape(token_ids)
        candidate_ids = backend.update_slice(
            ops.repeat(token_ids, k, axis=0),
            ops.reshape(candidates, (-1, 1)),
            index,
            axis=1,
        )
        candidate_state = keras.tree.map_structure(
            lambda x: ops.repeat(x, k, axis=0), state
        )
        _, candidate_hidden, _ = next(candidate_ids, candidate_state, index + 1)

        # (batch, k, max_length): cosine similarity to every position.
        candidate_hidden = ops.reshape(
            ops.cast(candidate_hidden, "float32"), (batch, k, -1)
        )
        similarity = ops.matmul(
            ops.normalize(candidate_hidden, axis=-1),
            ops.swapaxes(ops.normalize(ops.cast(context, "float32"), axis=-1), 1, 2),
        )
        # Cosines are >= -1: -2 marks positions not yet in the context.
        earlier = ops.arange(length, dtype="int32") < index
        similarity = ops.where(earlier[None, None, :], similarity, -2.0)
        # `amax`, not `max`: keras' torch `max` does not compile in fullgraph.
        penalty = ops.amax(similarity, axis=-1)
        ranking = (1 - self.alpha) * probabilities - self.alpha * penalty
        # A candidate that the processors banned (fewer than `k` allowed)
        # is never chosen.
        ranking = ops.where(probabilities > 0, ranking, float("-inf"))
        best = ops.argmax(ranking, axis=-1)[:, None]
        token = ops.take_along_axis(candidates, ops.cast(best, "int32"), axis=1)[:, 0]
        loop = loop._replace(sampler_state=context)
        loop = self.record(
            loop, token, logits=logits, scores=scores, hidden_states=hidden_states
        )
        return self.append(loop, token, state)

    def get_config(self):
        return {**super().get_config(), "k": self.k, "alpha": self.alpha}
