"""One call of `generate` or `stream`, prepared and read back on the host."""

import secrets

import numpy as np
from keras import ops

from keras_gen import processors as processors_lib
from keras_gen.models import prompts as prompts_lib
from keras_gen.models.stop_conditions import StopConditions
from keras_gen.streaming.generation_output import STEP_OUTPUTS
from keras_gen.streaming.generation_output import GenerationOutput
from keras_gen.streaming.incremental_detokenizer import IncrementalDetokenizer

# Stop ids enter the program as a fixed-size tensor padded with -1, so a
# different set of stop ids (up to this many) does not recompile.
STOP_TOKEN_SLOTS = 8
MIN_CACHE_LENGTH = 32
MIN_PREFILL_LENGTH = 16


def _check_stop_token_ids(stop_token_ids, vocabulary_size):
    if stop_token_ids is None:
        return []
    if isinstance(stop_token_ids, (int, np.integer)):
        stop_token_ids = [stop_token_ids]
    stop_token_ids = list(stop_token_ids)
    for token in stop_token_ids:
        if not isinstance(token, (int, np.integer)) or not 0 <= token < vocabulary_size:
            raise ValueError(
                "`stop_token_ids` must be None, 'auto' or token ids in "
                f"[0, {vocabulary_size}). Received: {stop_token_ids}"
            )
    if len(stop_token_ids) > STOP_TOKEN_SLOTS:
        raise ValueError(
            f"`stop_token_ids` takes at most {STOP_TOKEN_SLOTS} ids. "
            f"Received {len(stop_token_ids)}."
        )
    return [int(t) for t in stop_token_ids]


def _seed(seed):
    if seed is None:
        seed = secrets.randbits(31)
    if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
        raise TypeError(f"`seed` must be an int or None. Received: {seed!r}")
    return [int(seed) % (1 << 31), 0]


class GenerationRequest:
    """Everything the host knows about one generation call.

    It reads and checks the inputs, packs them into the compiled program's
    inputs, and turns what the program wrote back into `GenerationOutput`
    records: for a stream chunk by chunk, for `generate` at once. Rows end
    where the program ended them: after a generated stop token ("stop") or
    at their length limit ("length").
    """

    def __init__(
        self,
        lm,
        inputs,
        max_length=None,
        max_new_tokens=None,
        stop_token_ids="auto",
        seed=None,
        outputs=(),
        processors=None,
        stop_sequences=None,
        stop_strings=None,
        include_stop_string=False,
    ):
        self.tokenizer = lm.tokenizer
        backbone = lm.backbone
        prompts, self.form, self.width = prompts_lib.read_prompts(
            inputs, self.tokenizer
        )
        prompts_lib.check_prompts(prompts, backbone.vocabulary_size)
        self.prompts = prompts
        limit = backbone.max_sequence_length
        self.ends = prompts_lib.row_ends(
            prompts, max_length, max_new_tokens, self.width, limit
        )
        if isinstance(stop_token_ids, str) and stop_token_ids == "auto":
            stop_token_ids = getattr(self.tokenizer, "eos_token_ids", None)
        self.stop_token_ids = _check_stop_token_ids(
            stop_token_ids, backbone.vocabulary_size
        )
        self.outputs = tuple(name for name in STEP_OUTPUTS if name in outputs)
        sampler = lm.sampler
        if self.outputs and not sampler.supports_step_outputs:
            raise ValueError(
                f"{type(sampler).__name__} reorders its rows every step, so it "
                f"has no per-step outputs: drop {list(self.outputs)} (beam "
                "search returns `sequence_scores`)."
            )
        # Output rows: `n` per prompt (beam search's num_return_sequences).
        n = self.rows_per_prompt = sampler.num_return_sequences
        self.row_prompts = [prompt for prompt in prompts for _ in range(n)]
        self.row_ends = [end for end in self.ends for _ in range(n)]
        self.processors = (
            lm.processors
            if processors is None
            else processors_lib.get_list(processors)
        )
        for processor in self.processors:
            processor.check_vocabulary(backbone.vocabulary_size)
        self.stop_conditions = StopConditions(
            stop_sequences, stop_strings, self.tokenizer, backbone.vocabulary_size
        )
        self.include_stop_string = include_stop_string
        self.cache_length = prompts_lib.bucket(max(self.ends), MIN_CACHE_LENGTH, limit)
        self.prefill_length = min(
            self.cache_length,
            prompts_lib.bucket(max(map(len, prompts)), MIN_PREFILL_LENGTH),
        )
        token_ids, mask = prompts_lib.pack(prompts, self.cache_length)
        stop_slots = self.stop_token_ids + [-1] * (
            STOP_TOKEN_SLOTS - len(self.stop_token_ids)
        )
        self.program_inputs = {
            "token_ids": ops.convert_to_tensor(token_ids, "int32"),
            "padding_mask": ops.convert_to_tensor(mask, "bool"),
            "end": ops.convert_to_tensor(np.asarray(self.ends, "int32")),
            "stop_token_ids": ops.convert_to_tensor(stop_slots, "int32"),
            "seed": ops.convert_to_tensor(
                _seed(sampler.seed if seed is None else seed), "int32"
            ),
            "sampler": sampler.get_parameter_tensors(),
            "processors": [p.get_parameter_tensors() for p in self.processors],
            **self.stop_conditions.program_inputs(),
        }
        self.static_arguments = {
            "prefill_length": self.prefill_length,
            "outputs": self.outputs,
        }
        # Host-side progress of each output row: tokens handed out so far.
        rows = self.row_prompts
        self.emitted = [len(p) for p in rows]
        self.finish_reasons = [None] * len(rows)
        self.detokenizers = [
            IncrementalDetokenizer(self.tokenizer, prompt) if self.tokenizer else None
            for prompt in rows
        ]
        self.shown_text = [""] * len(rows)

    def _advance_rows(self, token_ids, limits):
        """Per row, the `[start, stop)` positions that became final."""
        if isinstance(limits, int):
            limits = [limits] * len(self.row_ends)
        spans = []
        for r, (row, end, index) in enumerate(zip(token_ids, self.row_ends, limits)):
            start = self.emitted[r]
            if self.finish_reasons[r] is not None:
                spans.append((start, start))
                continue
            stop = max(start, min(index, end))
            for position in range(start, stop):
                if row[position] in self.stop_token_ids or (
                    self.stop_conditions.ends_at(row, position)
                ):
                    stop = position + 1
                    self.finish_reasons[r] = "stop"
                    break
            else:
                if stop == end:
                    self.finish_reasons[r] = "length"
            spans.append((start, stop))
            self.emitted[r] = stop
        return spans

    def read(self, outputs, limits, time_is_up=False):
        """The record of what the rows produced since the last `read`.

        Args:
            outputs: the program's output dict of arrays (`token_ids` and
                the requested per-step outputs). With per-row `lengths`
                (speculative decoding), each row is read up to its own
                length, and `accepted_tokens` and `draft_tokens` go into the
                record.
            limits: how many positions are final: one int for every row,
                or one per row.
            time_is_up: end every running row with reason `"time"`.
        """
        token_ids = np.asarray(ops.convert_to_numpy(outputs["token_ids"]))
        if "lengths" in outputs:
            limits = [int(n) for n in ops.convert_to_numpy(outputs["lengths"])]
        spans = self._advance_rows(token_ids, limits)
        if time_is_up:
            self.finish_reasons = [reason or "time" for reason in self.finish_reasons]
        record = GenerationOutput(
            token_ids=[token_ids[r, a:b].tolist() for r, (a, b) in enumerate(spans)],
            finish_reasons=list(self.finish_reasons),
        )
        if spans:
            low = min(a for a, _ in spans)
            high = max(max(b for _, b in spans), low)
            for name in self.outputs:
                window = np.asarray(ops.convert_to_numpy(outputs[name][:, low:high]))
                setattr(
                    record,
                    name,
                    [window[r, a - low : b - low] for r, (a, b) in enumerate(spans)],
                )
        for name in ("accepted_tokens", "draft_tokens"):
            if name in outputs:
                counts = ops.convert_to_numpy(outputs[name])
                setattr(record, name, [int(n) for n in counts])
        if self.tokenizer is not None:
            record.text = [self._text(r, ids) for r, ids in enumerate(record.token_ids)]
        if "sequence_scores" in outputs:
            record.sequence_scores = ops.convert_to_numpy(
                outputs["sequence_scores"]
            ).tolist()
        if self.done:
            record.sequences = [
                prompt + token_ids[r, len(prompt) : self.emitted[r]].tolist()
                for r, prompt in enumerate(self.row_prompts)
            ]
        return record

    def _text(self, row, new_token_ids):
        """The row's text since the last read: whole characters only, with
        no stop token and (unless asked) no stop string."""
        detokenizer = self.detokenizers[row]
        finished = self.finish_reasons[row] is not None
        if new_token_ids and new_token_ids[-1] in self.stop_token_ids and finished:
            new_token_ids = new_token_ids[:-1]
        detokenizer.add_tokens(new_token_ids)
        if finished:
            detokenizer.finalize()
        text = detokenizer.text
        if not self.include_stop_string:
            text = self.stop_conditions.visible_text(text, finished)
        shown = self.shown_text[row]
        if not text.startswith(shown):
            return ""
        self.shown_text[row] = text
        return text[len(shown) :]

    @property
    def done(self):
        return all(reason is not None for reason in self.finish_reasons)

    def format(self, record, strip_prompt=False):
        """The final record in the form of the input (list, dict or text).

        With `n` sequences per prompt (beam search), each prompt's answer
        is a list of `n`, best first; a dict answer stays flat.
        """
        if self.form in (prompts_lib.TEXT, prompts_lib.TEXTS):
            rows = record.text
            if not strip_prompt:
                rows = [
                    detokenizer.prompt_text + text
                    for detokenizer, text in zip(self.detokenizers, rows)
                ]
        else:
            rows = record.token_ids if strip_prompt else record.sequences
        if self.form == prompts_lib.DICT:
            width = max(self.width or 0, max(map(len, rows)))
            token_ids, mask = prompts_lib.pack(rows, width)
            return {"token_ids": token_ids, "padding_mask": mask}
        return prompts_lib.per_prompt(rows, self.form, self.rows_per_prompt)
