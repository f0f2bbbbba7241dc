"""The record that `generate(return_dict=True)` returns and `stream` yields."""

import dataclasses

import numpy as np

# Per-step arrays a caller can ask for: `output_<name>=True`, and the top
# alternatives of `top_logprobs=n`.
STEP_OUTPUTS = (
    "log_probs",
    "scores",
    "logits",
    "hidden_states",
    "top_token_ids",
    "top_log_probs",
)


@dataclasses.dataclass
class GenerationOutput:
    """New tokens, text and per-step outputs, one entry per row of a batch.

    A stream yields one `GenerationOutput` per chunk, holding what each row
    produced since the previous chunk; `generate(..., return_dict=True)`
    returns one for the whole run. Joining the chunks of a stream with
    `GenerationOutput.join` gives the record `generate` returns, field by
    field.

    Attributes:
        token_ids: list (rows) of lists of new token ids.
        text: list of new text per row, or `None` without a tokenizer.
        finish_reasons: list with, per row, `None` while the row runs, else
            why it ended: `"stop"` (a stop token or sequence), `"length"`
            (`max_length` / `max_new_tokens`) or `"time"` (`max_time`).
        log_probs: per row, a `(new,)` float32 array of the log-probability
            of each chosen token under the scores the sampler saw; `None`
            unless requested.
        scores: per row, `(new, vocab)` logits after processors and
            temperature; `None` unless requested.
        logits: per row, `(new, vocab)` raw model logits; `None` unless
            requested.
        hidden_states: per row, `(new, hidden)` final hidden states; `None`
            unless requested.
        top_token_ids, top_log_probs: with `top_logprobs=n`, per row,
            `(new, n)` arrays: at each step the `n` most likely tokens and
            their log-probabilities under the scores the sampler saw, most
            likely first.
        sequences: in the final record only, per row the prompt followed by
            the new tokens.
        sequence_scores: beam search only: the length-normalised score of
            each returned sequence. With `n` sequences per prompt the rows
            are flat: prompt `b`'s are rows `b * n` to `b * n + n - 1`. In
            a stream's chunk, `None` for rows whose search still runs; the
            last chunk holds every score.
        messages: in the final record of a conversation's reply only: per
            row the assistant message (`assistant_message`): its
            `content`, and its `reasoning_content` when the template
            thinks, its `tool_calls` (arguments as dicts) when it called
            the `tools`. It goes back into the conversation as it is.
        accepted_tokens: speculative decoding only: per row, how many
            draft tokens the target accepted so far.
        draft_tokens: speculative decoding only: per row, how many draft
            tokens were proposed so far, not counting proposals past the
            row's length limit (`accepted_tokens / draft_tokens` is the
            row's acceptance rate).
    """

    token_ids: list
    text: list = None
    finish_reasons: list = None
    log_probs: list = None
    scores: list = None
    logits: list = None
    hidden_states: list = None
    top_token_ids: list = None
    top_log_probs: list = None
    sequences: list = None
    sequence_scores: list = None
    messages: list = None
    accepted_tokens: list = None
    draft_tokens: list = None

    def __getitem__(self, name):
        """`record["sequences"]` reads like `record.sequences`."""
        if name not in self.__dataclass_fields__:
            raise KeyError(name)
        return getattr(self, name)

    @property
    def finished(self):
        """Per row, whether the row has ended."""
        return [reason is not None for reason in self.finish_reasons]

    @classmethod
    def join(cls, chunks):
        """The record of a whole stream: chunks concatenated row by row."""
        chunks = list(chunks)
        if not chunks:
            raise ValueError("`chunks` is empty: nothing to join.")
        first, last = chunks[0], chunks[-1]
        rows = range(len(first.token_ids))
        joined = {
            "token_ids": [sum((c.token_ids[r] for c in chunks), []) for r in rows],
            "finish_reasons": [
                next(
                    (
                        c.finish_reasons[r]
                        for c in reversed(chunks)
                        if c.finish_reasons[r]
                    ),
                    None,
                )
                for r in rows
            ],
            "sequences": last.sequences,
            "sequence_scores": last.sequence_scores,
            "messages": last.messages,
            # Counts so far: the last chunk's are the totals.
            "accepted_tokens": last.accepted_tokens,
            "draft_tokens": last.draft_tokens,
        }
        if first.text is not None:
            joined["text"] = ["".join(c.text[r] for c in chunks) for r in rows]
        for name in STEP_OUTPUTS:
            if getattr(first, name) is not None:
                joined[name] = [
                    np.concatenate([getattr(c, name)[r] for c in chunks]) for r in rows
                ]
        return cls(**joined)
