"""Beam search."""

import collections

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


def where_rows(flags, x, y):
    """Row `r` of `x` where `flags[r]`, else of `y`: `(rows,)` flags, any
    trailing shape."""
    flags = ops.convert_to_tensor(flags)
    return ops.where(ops.reshape(flags, (-1,) + (1,) * (ops.ndim(x) - 1)), x, y)


class BeamState(
    collections.namedtuple(
        "BeamState",
        ("scores", "finished_ids", "finished_scores", "finished", "finished_outputs"),
    )
):
    """Beam search's own loop state, per beam row: the running beams'
    scores, and each row's best finished hypotheses (token ids, scores,
    whether the slot holds one, per-step outputs)."""


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

    Per-step outputs (`outputs` of `start`) are kept per beam: every step
    writes the beams' values at the new position, the buffers are reordered
    with the beams' parents and copied into a hypothesis when it finishes,
    so each returned sequence carries the outputs of its own tokens. Its
    `log_probs` are the log-probabilities of its tokens under the step's
    (processed, tempered) scores, as transformers'
    `compute_transition_scores(sequences, scores, beam_indices)`: they sum
    to `sequence_scores * generated_length ** length_penalty`.

    Call arguments:
        As `Sampler`. The result is a dict: `"token_ids"`, `(batch * n,
        length)` with prompt `b`'s hypotheses at rows `b * n` to
        `b * n + n - 1` (`n = num_return_sequences`),
        `"sequence_scores"`, `(batch * n,)`, their scores, and the
        requested per-step outputs in the same rows.

    Examples:
    >>> sampler = BeamSampler(num_beams=3, length_penalty=0.5)
    >>> sampler.get_parameters()
    {'temperature': 1.0, 'length_penalty': 0.5, 'early_stopping': 0.0}
    """

    deterministic = True
    # Its numbers are one for the whole search (it runs in `generate` only).
    per_row = False

    def __init__(
        self,
        num_beams=5,
        length_penalty=1.0,
        early_stopping=False,
        num_return_sequences=1,
        temperature=1.0,
        seed=None,
    ):
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
        outputs=None,
        **kwargs,
    ):
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
        outputs = {name: repeat(buffer) for name, buffer in (outputs or {}).items()}
        loop = super().start(
            repeat(prompt),
            state,
            index,
            mask,
            stop_token_ids,
            None,
            end,
            seed,
            outputs=outputs,
            **kwargs,
        )
        first = ops.cast(ops.arange(num_beams) > 0, "float32") * NEG
        return loop._replace(
            sampler_state=BeamState(
                scores=ops.tile(first, (batch_beams // num_beams,)),
                finished_ids=loop.token_ids,
                finished_scores=ops.full((batch_beams,), NEG, "float32"),
                finished=ops.zeros((batch_beams,), "bool"),
                finished_outputs=dict(loop.outputs),
            )
        )

    def step(self, next, loop):
        """Extend every live beam, keep the best, record finished ones."""
        index, num_beams = loop.index, self.num_beams
        beam = loop.sampler_state
        logits, hidden_states, state = next(loop.token_ids, loop.state, index)
        logits = ops.cast(logits, "float32")
        scores = self.process_logits(logits, loop) / self.temperature
        log_probs = ops.log_softmax(scores, axis=-1)
        loop = self._record_beams(
            loop, log_probs, logits=logits, scores=scores, hidden_states=hidden_states
        )
        batch_beams, vocabulary_size = ops.shape(log_probs)
        batch = batch_beams // num_beams

        def per_row(x):  # (batch * num_beams,) -> (batch,); beams agree
            return ops.reshape(x, (batch, num_beams))[:, 0]

        def is_stop(tokens):
            return ops.any(tokens[..., None] == loop.stop_token_ids, axis=-1)

        prompt_length = per_row(ops.sum(ops.cast(loop.mask, "int32"), axis=1))
        end = per_row(loop.end)
        # A row inside its prompt, finished or at its end keeps its beams.
        active = ops.logical_and(
            ops.logical_and(index >= prompt_length, index < end),
            ops.logical_not(per_row(loop.done)),
        )
        last = index + 1 >= end
        generated = ops.cast(ops.maximum(index + 1 - prompt_length, 1), "float32")
        # (batch, num_beams * vocab): summed log-probs of every continuation.
        totals = ops.reshape(log_probs + beam.scores[:, None], (batch, -1))
        tokens = ops.arange(num_beams * vocabulary_size, dtype="int32")
        ends = ops.logical_or(is_stop(tokens % vocabulary_size)[None], last[:, None])

        # Only the num_beams best continuations may become hypotheses.
        best, indices = ops.top_k(totals, num_beams)
        indices = ops.cast(indices, "int32")
        tokens = indices % vocabulary_size
        accept = ops.logical_and(
            ops.logical_or(is_stop(tokens), last[:, None]), active[:, None]
        )
        # Never from a beam that is not live, nor by a banned token (-inf):
        # when a processor (structured output) leaves fewer continuations
        # than beams, the others are no hypotheses.
        accept = ops.logical_and(accept, best > NEG / 2)
        best = best / ops.power(generated, self.length_penalty)[:, None]
        loop = self._add_finished(
            loop,
            best,
            indices // vocabulary_size,
            tokens,
            accept,
            self._chosen(log_probs, indices),
        )

        # The beams that go on: the best continuations that do not finish.
        scores, indices = ops.top_k(ops.where(ends, NEG, totals), num_beams)
        indices = ops.cast(indices, "int32")
        keep = ops.arange(num_beams, dtype="int32")[None, :]
        parents = ops.where(active[:, None], indices // vocabulary_size, keep)
        previous = ops.reshape(loop.sampler_state.scores, (batch, num_beams))
        scores = ops.where(active[:, None], scores, previous)
        beams = self._flat(parents, num_beams)
        state = keras.tree.map_structure(lambda x: ops.take(x, beams, 0), state)
        loop = loop._replace(
            processor_states={
                key: ops.take(value, beams, axis=0)
                for key, value in loop.processor_states.items()
            },
            token_ids=ops.take(loop.token_ids, beams, axis=0),
            sampler_state=loop.sampler_state._replace(
                scores=ops.reshape(scores, (-1,))
            ),
            outputs=self._continue(
                loop.outputs, beams, self._chosen(log_probs, indices), index
            ),
        )
        tokens = ops.reshape(indices % vocabulary_size, (-1,))
        loop = self.append(loop, tokens, state)
        # Running beams hold no stop token: a row ends as a whole, here.
        stop = self._row_done(loop, scores[:, 0], generated, prompt_length, end)
        stop = ops.logical_and(active, ops.logical_or(last, stop))
        done = ops.logical_or(per_row(loop.done), stop)
        return loop._replace(done=ops.repeat(done, num_beams, axis=0))

    def _record_beams(self, loop, log_probs, **values):
        """Write this step's per-step values of every beam at `index`.

        All but `log_probs`: the log-prob of the chosen token depends on
        the continuation, and `_continue` writes it.
        """
        outputs = loop.outputs
        if "top_log_probs" in outputs:
            count = ops.shape(outputs["top_log_probs"])[-1]
            values["top_log_probs"], values["top_token_ids"] = ops.top_k(
                log_probs, count
            )
        outputs = {
            name: (
                buffer
                if name == "log_probs"
                else backend.update_slice(
                    buffer,
                    ops.cast(values[name], buffer.dtype)[:, None],
                    loop.index,
                    1,
                )
            )
            for name, buffer in outputs.items()
        }
        return loop._replace(outputs=outputs)

    def _chosen(self, log_probs, indices):
        """`(batch * num_beams,)` log-probs of the continuations `indices`,
        `(batch, num_beams)` flat indices into each row's beams x vocab."""
        batch = ops.shape(indices)[0]
        flat = ops.reshape(log_probs, (batch, -1))
        return ops.reshape(ops.take_along_axis(flat, indices, axis=1), (-1,))

    def _continue(self, outputs, beams, log_probs, index):
        """The per-step buffers of continuations: the rows `beams` of their
        parents, with the `log_probs` of their new tokens at `index`."""
        outputs = {name: ops.take(buffer, beams, 0) for name, buffer in outputs.items()}
        if "log_probs" in outputs:
            outputs["log_probs"] = backend.update_slice(
                outputs["log_probs"], log_probs[:, None], index, 1
            )
        return outputs

    def _add_finished(self, loop, scores, parents, tokens, accept, log_probs):
        """Merge the accepted `(batch, num_beams)` candidates into each row's
        `num_beams` best finished hypotheses."""
        num_beams = self.num_beams
        batch = ops.shape(scores)[0]
        parents = self._flat(parents, num_beams)
        candidates = ops.take(loop.token_ids, parents, 0)
        candidates = backend.update_slice(
            candidates, ops.reshape(tokens, (-1, 1)), loop.index, axis=1
        )
        beam = loop.sampler_state
        new_scores = ops.reshape(ops.where(accept, scores, NEG), (-1,))

        def merge(finished, new):  # (batch * 2 * num_beams, ...)
            shape = (batch, num_beams) + tuple(ops.shape(new))[1:]
            merged = ops.concatenate(
                [ops.reshape(finished, shape), ops.reshape(new, shape)], axis=1
            )
            return ops.reshape(merged, (-1,) + shape[2:])

        kept_scores, kept = ops.top_k(
            ops.reshape(merge(beam.finished_scores, new_scores), (batch, -1)),
            num_beams,
        )
        kept = self._flat(kept, 2 * num_beams)

        def keep(finished, new):
            return ops.take(merge(finished, new), kept, 0)

        new_outputs = self._continue(loop.outputs, parents, log_probs, loop.index)
        beam = beam._replace(
            finished_ids=keep(beam.finished_ids, candidates),
            finished_scores=ops.reshape(kept_scores, (-1,)),
            finished=keep(beam.finished, ops.reshape(accept, (-1,))),
            finished_outputs={
                name: keep(buffer, new_outputs[name])
                for name, buffer in beam.finished_outputs.items()
            },
        )
        return loop._replace(sampler_state=beam)

    def _row_done(self, loop, best_running, generated, prompt_length, end):
        """`(batch,)`: rows whose hypotheses can no longer change."""
        beam = loop.sampler_state
        finished = ops.reshape(beam.finished, (-1, self.num_beams))
        scores = ops.reshape(beam.finished_scores, (-1, self.num_beams))
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
        """The `num_return_sequences` best hypotheses per prompt, best first,
        with their scores and per-step outputs.

        A row that never generated (its end was its prompt's) has no
        finished hypothesis and answers with its beams as they are.
        """
        num_beams, n = self.num_beams, self.num_return_sequences

        def best(x):  # (batch * num_beams, ...) -> (batch * n, ...)
            x = ops.reshape(x, (-1, num_beams) + tuple(ops.shape(x))[1:])[:, :n]
            return ops.reshape(x, (-1,) + tuple(ops.shape(x))[2:])

        beam = loop.sampler_state
        finished = best(beam.finished)

        def pick(hypotheses, beams):
            return where_rows(finished, best(hypotheses), best(beams))

        return {
            "token_ids": pick(beam.finished_ids, loop.token_ids),
            "sequence_scores": pick(beam.finished_scores, beam.scores),
            **{
                name: pick(beam.finished_outputs[name], buffer)
                for name, buffer in loop.outputs.items()
            },
        }

    def stream_view(self, loop):
        """Per returned sequence, what no later step can change.

        While a prompt's search runs, its live beams and finished
        hypotheses share a prefix: it is final whichever of them wins, so
        each of the prompt's `num_return_sequences` rows may hand out that
        prefix (with its per-step outputs, copies of the common ancestor's).
        When the search ends, each row hands out the rest of its final
        hypothesis, and `sequence_scores` (`NaN` for rows still searching).
        """
        num_beams, n = self.num_beams, self.num_return_sequences
        index = int(ops.convert_to_numpy(loop.index))
        beam = loop.sampler_state

        def rows(x):  # (batch * num_beams, ...) -> (batch, num_beams, ...)
            x = np.asarray(ops.convert_to_numpy(x))
            return x.reshape((-1, num_beams) + x.shape[1:])

        beams, finished_ids = rows(loop.token_ids), rows(beam.finished_ids)
        live, finished = rows(beam.scores) > NEG / 2, rows(beam.finished)
        done = rows(loop.done).all(1) | (rows(loop.end)[:, 0] <= index)
        limits = []
        for b in range(len(beams)):
            candidates = np.concatenate(
                [beams[b][live[b]], finished_ids[b][finished[b]]]
            )
            agree = (candidates == candidates[:1]).all(0)[:index]
            limit = len(agree) if agree.all() else int(np.argmin(agree))
            limits += [beams.shape[-1] if done[b] else limit] * n

        # A searching prompt's rows show its best candidate: its first beam
        # if live, else its best finished hypothesis.
        final = self.finish(loop)
        first = np.repeat(np.arange(len(beams)) * num_beams, n)
        use_final, use_beam = np.repeat(done, n), np.repeat(live[:, 0], n)

        def pick(final_rows, beam_rows, hypothesis_rows):
            searching = where_rows(
                use_beam,
                ops.take(beam_rows, first, 0),
                ops.take(hypothesis_rows, first, 0),
            )
            return where_rows(use_final, final_rows, searching)

        hypotheses = beam.finished_outputs
        view = {
            "token_ids": pick(final["token_ids"], loop.token_ids, beam.finished_ids),
            "sequence_scores": np.where(
                use_final, ops.convert_to_numpy(final["sequence_scores"]), np.nan
            ),
            **{
                name: pick(final[name], buffer, hypotheses[name])
                for name, buffer in loop.outputs.items()
            },
        }
        return view, limits

    def get_config(self):
        return {
            **super().get_config(),
            "num_beams": self.num_beams,
            "length_penalty": self.length_penalty,
            "early_stopping": self.early_stopping,
            "num_return_sequences": self.num_return_sequences,
        }
