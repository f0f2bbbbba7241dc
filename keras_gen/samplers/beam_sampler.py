"""Beam search."""

import keras
import numpy as np
from keras import ops

from keras_gen import backend
from keras_gen.samplers.sampler import Sampler
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_number

# The score of an empty hypothesis slot, of a beam that is not live yet and of
# a continuation that may not be taken. Finite, so arithmetic never makes NaN.
NEG = -1e9

# `early_stopping` reaches the compiled program as a number.
EARLY_STOPPING = {False: 0.0, True: 1.0, "never": 2.0}


class BeamSampler(Sampler):
    """Beam search: keeps the `num_beams` most likely sequences per prompt.

    At every step each beam is extended by every token, and the `num_beams`
    continuations of a prompt with the highest summed log-probability go on.
    A continuation among the `num_beams` best that emits a stop token, or
    reaches the row's end, becomes a finished hypothesis, frozen and scored
    `sum_log_probs / generated_length ** length_penalty`; each prompt keeps
    its `num_beams` best. The semantics are those of Hugging Face
    transformers' beam search; prompts of a batch are searched independently.

    The cache holds `num_beams` copies of the batch's, allocated once, and is
    reordered by gathering rows as beams are chosen.

    Args:
        num_beams: int >= 1, beams per prompt. Sets the program's shapes.
        length_penalty: float, the exponent of the length in the score of a
            finished hypothesis: > 0 favours long ones, < 0 short ones.
        early_stopping: when a prompt is done before its end. `True`: as soon
            as it has `num_beams` finished hypotheses. `False`: when it has
            them and its best running beam, scored at its current length,
            cannot beat the worst. `"never"`: as `False`, but with a positive
            `length_penalty` the best beam is scored at the row's end.
        num_return_sequences: int in [1, num_beams], hypotheses returned per
            prompt, best first.
        temperature: float > 0, logits are divided by it before the
            log-softmax (1.0, the default, is transformers' beam search).
        seed: unused (beam search is deterministic); accepted like every
            sampler's.

    Call arguments:
        As `Sampler`. The result is a dict: `"token_ids"`, `(batch * n,
        length)` with prompt `b`'s hypotheses at rows `b * n` to
        `b * n + n - 1` (`n = num_return_sequences`), and
        `"sequence_scores"`, `(batch * n,)`, their scores.

    Examples:
    >>> sampler = BeamSampler(num_beams=3, length_penalty=0.5)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'length_penalty': 0.5, 'early_stopping': 0.0}
    """

    deterministic = True

    def __init__(self, num_beams=5, length_penalty=1.0, early_stopping=False,
                 num_return_sequences=1, temperature=1.0, seed=None):
        self.num_beams = check_count("num_beams", num_beams)
        self.num_return_sequences = check_count(
            "num_return_sequences", num_return_sequences
        )
        if num_return_sequences > num_beams:
            raise ValueError(
                "`num_return_sequences` must be <= `num_beams`. Received: "
                f"num_return_sequences={num_return_sequences}, num_beams={num_beams}"
            )
        self.length_penalty = length_penalty
        self.early_stopping = early_stopping
        super().__init__(temperature=temperature, seed=seed)

    def get_parameters(self):
        early_stopping = self.early_stopping
        penalty = check_number("length_penalty", self.length_penalty, -100, 100)
        if not (isinstance(early_stopping, bool) or early_stopping == "never"):
            raise ValueError(
                "`early_stopping` must be True, False or 'never'. "
                f"Received: {early_stopping!r}"
            )
        return {
            **super().get_parameters(),
            "length_penalty": float(penalty),
            "early_stopping": EARLY_STOPPING[early_stopping],
        }

    def _flat(self, beams, width):
        """`(batch, n)` indices into each row's `width` slots, made global."""
        offsets = ops.arange(ops.shape(beams)[0], dtype="int32")[:, None] * width
        return ops.reshape(ops.cast(beams, "int32") + offsets, (-1,))

    # Beams are reordered every step: per-step outputs have no single row.
    supports_step_outputs = False

    def start(self, prompt, state, index, mask=None, stop_token_ids=None,
              hidden_states=None, end=None, seed=None, **kwargs):
        """The loop state of `num_beams` copies of every row, all in step.

        Rows `b * num_beams` to `b * num_beams + num_beams - 1` are prompt
        `b`'s beams. Only the first is live at the start (the others score
        `NEG`), so the first step does not pick one token `num_beams` times.
        """
        num_beams = self.num_beams

        def repeat(x):
            return ops.repeat(x, num_beams, axis=0)

        prompt = ops.convert_to_tensor(prompt, "int32")
        batch_beams = ops.shape(prompt)[0] * num_beams
        if mask is not None:
            mask = repeat(ops.convert_to_tensor(mask, "bool"))
        if end is not None and ops.ndim(ops.convert_to_tensor(end)) > 0:
            end = repeat(ops.convert_to_tensor(end, "int32"))
        if state is not None:
            state = keras.tree.map_structure(repeat, state)
        loop = super().start(
            repeat(prompt), state, index, mask, stop_token_ids, None, end, seed,
            **kwargs,
        )
        first = ops.cast(ops.arange(num_beams) > 0, "float32") * NEG
        return {
            **loop,
            "beam_scores": ops.tile(first, (batch_beams // num_beams,)),
            "beam_finished_ids": loop["token_ids"],
            "beam_finished_scores": ops.full((batch_beams,), NEG, "float32"),
            "beam_finished": ops.zeros((batch_beams,), "bool"),
        }

    def step(self, next, loop):
        """Extend every live beam, keep the best, record finished ones."""
        index, num_beams = loop["index"], self.num_beams
        logits, _, state = next(loop["token_ids"], loop["state"], index)
        logits = self.process_logits(ops.cast(logits, "float32"), loop)
        log_probs = ops.log_softmax(logits / self.temperature, axis=-1)
        batch_beams, vocabulary_size = ops.shape(log_probs)
        batch = batch_beams // num_beams

        def per_row(x):  # (batch * num_beams,) -> (batch,); beams agree
            return ops.reshape(x, (batch, num_beams))[:, 0]

        def is_stop(tokens):
            return ops.any(tokens[..., None] == loop["stop_token_ids"], axis=-1)

        prompt_length = per_row(ops.sum(ops.cast(loop["mask"], "int32"), axis=1))
        end = per_row(loop["end"])
        # A row inside its prompt, finished or at its end keeps its beams.
        active = ops.logical_and(
            ops.logical_and(index >= prompt_length, index < end),
            ops.logical_not(per_row(loop["done"])),
        )
        last = index + 1 >= end
        generated = ops.cast(ops.maximum(index + 1 - prompt_length, 1), "float32")
        # (batch, num_beams * vocab): summed log-probs of every continuation.
        totals = ops.reshape(log_probs + loop["beam_scores"][:, None], (batch, -1))
        tokens = ops.arange(num_beams * vocabulary_size, dtype="int32")
        ends = ops.logical_or(is_stop(tokens % vocabulary_size)[None], last[:, None])

        # Only the num_beams best continuations may become hypotheses.
        best, indices = ops.top_k(totals, num_beams)
        indices = ops.cast(indices, "int32")
        tokens = indices % vocabulary_size
        accept = ops.logical_and(
            ops.logical_or(is_stop(tokens), last[:, None]), active[:, None]
        )
        best = best / ops.power(generated, self.length_penalty)[:, None]
        loop = self._add_finished(
            loop, best, indices // vocabulary_size, tokens, accept
        )

        # The beams that go on: the best continuations that do not finish.
        scores, indices = ops.top_k(ops.where(ends, NEG, totals), num_beams)
        indices = ops.cast(indices, "int32")
        keep = ops.arange(num_beams, dtype="int32")[None, :]
        parents = ops.where(active[:, None], indices // vocabulary_size, keep)
        previous = ops.reshape(loop["beam_scores"], (batch, num_beams))
        scores = ops.where(active[:, None], scores, previous)
        beams = self._flat(parents, num_beams)
        state = keras.tree.map_structure(lambda x: ops.take(x, beams, 0), state)
        loop = {
            **loop,
            "token_ids": ops.take(loop["token_ids"], beams, axis=0),
            "beam_scores": ops.reshape(scores, (-1,)),
        }
        tokens = ops.reshape(indices % vocabulary_size, (-1,))
        loop = self.append(loop, tokens, state)
        # Running beams hold no stop token: a row ends as a whole, here.
        stop = self._row_done(loop, scores[:, 0], generated, prompt_length, end)
        stop = ops.logical_and(active, ops.logical_or(last, stop))
        done = ops.logical_or(per_row(loop["done"]), stop)
        return {**loop, "done": ops.repeat(done, num_beams, axis=0)}

    def _add_finished(self, loop, scores, parents, tokens, accept):
        """Merge the accepted `(batch, num_beams)` candidates into each row's
        `num_beams` best finished hypotheses."""
        num_beams = self.num_beams
        batch = ops.shape(scores)[0]
        candidates = ops.take(loop["token_ids"], self._flat(parents, num_beams), 0)
        candidates = backend.update_slice(
            candidates, ops.reshape(tokens, (-1, 1)), loop["index"], axis=1
        )
        length = ops.shape(candidates)[1]

        def merge(finished, new):  # (batch, 2 * num_beams, ...)
            shape = (batch, num_beams) + tuple(ops.shape(new))[1:]
            return ops.concatenate(
                [ops.reshape(finished, shape), ops.reshape(new, shape)], axis=1
            )

        new_scores = ops.reshape(ops.where(accept, scores, NEG), (-1,))
        kept_scores, kept = ops.top_k(
            merge(loop["beam_finished_scores"], new_scores), num_beams
        )
        kept = self._flat(kept, 2 * num_beams)
        ids = merge(loop["beam_finished_ids"], candidates)
        flags = merge(loop["beam_finished"], ops.reshape(accept, (-1,)))
        return {
            **loop,
            "beam_finished_ids": ops.take(ops.reshape(ids, (-1, length)), kept, 0),
            "beam_finished_scores": ops.reshape(kept_scores, (-1,)),
            "beam_finished": ops.take(ops.reshape(flags, (-1,)), kept, 0),
        }

    def _row_done(self, loop, best_running, generated, prompt_length, end):
        """`(batch,)`: rows whose hypotheses can no longer change."""
        finished = ops.reshape(loop["beam_finished"], (-1, self.num_beams))
        scores = ops.reshape(loop["beam_finished_scores"], (-1, self.num_beams))
        never = ops.logical_and(
            self.early_stopping == EARLY_STOPPING["never"], self.length_penalty > 0
        )
        length = ops.where(never, ops.cast(end - prompt_length, "float32"), generated)
        best_possible = best_running / ops.power(length, self.length_penalty)
        # `amin`, not `min`: keras' torch `min` does not compile in fullgraph.
        hopeless = best_possible <= ops.amin(scores, axis=1)
        early = ops.logical_or(self.early_stopping == EARLY_STOPPING[True], hopeless)
        return ops.logical_and(ops.all(finished, axis=1), early)

    def finish(self, loop):
        """The `num_return_sequences` best hypotheses per prompt, best first.

        A row that never generated (its end was its prompt's) has no
        finished hypothesis and answers with its beams as they are.
        """
        num_beams, n = self.num_beams, self.num_return_sequences

        def best(x):  # (batch * num_beams, ...) -> (batch * n, ...)
            x = ops.reshape(x, (-1, num_beams) + tuple(ops.shape(x))[1:])[:, :n]
            return ops.reshape(x, (-1,) + tuple(ops.shape(x))[2:])

        finished = best(loop["beam_finished"])
        token_ids = ops.where(
            finished[:, None], best(loop["beam_finished_ids"]), best(loop["token_ids"])
        )
        scores = ops.where(
            finished, best(loop["beam_finished_scores"]), best(loop["beam_scores"])
        )
        return {"token_ids": token_ids, "sequence_scores": scores}

    def stream_view(self, loop):
        """Per row, the tokens every hypothesis that can still win agrees on.

        The live beams and the finished hypotheses of a row share a prefix:
        it is final, whichever of them wins. A finished row hands out the
        rest of its best hypothesis. Needs `num_return_sequences=1`.
        """
        n = self.num_beams
        index = int(ops.convert_to_numpy(loop["index"]))

        def rows(name):  # (batch * num_beams, ...) -> (batch, num_beams, ...)
            x = np.asarray(ops.convert_to_numpy(loop[name]))
            return x.reshape((-1, n) + x.shape[1:])

        beams, finished_ids = rows("token_ids"), rows("beam_finished_ids")
        live, finished = rows("beam_scores") > NEG / 2, rows("beam_finished")
        done = rows("done").all(1) | (rows("end")[:, 0] <= index)
        best = np.asarray(ops.convert_to_numpy(self.finish(loop)["token_ids"]))
        limits = []
        for b in range(len(beams)):
            candidates = np.concatenate([beams[b][live[b]], finished_ids[b][finished[b]]])
            agree = (candidates == candidates[:1]).all(0)[:index]
            limits.append(len(agree) if agree.all() else int(np.argmin(agree)))
            if not done[b]:
                best[b] = candidates[0]
        limits = [len(best[0]) if d else limit for d, limit in zip(done, limits)]
        return best, limits

    def get_config(self):
        return {
            **super().get_config(),
            "num_beams": self.num_beams,
            "length_penalty": self.length_penalty,
            "early_stopping": self.early_stopping,
            "num_return_sequences": self.num_return_sequences,
        }
