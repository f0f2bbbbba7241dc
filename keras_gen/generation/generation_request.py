"""One call of `generate` or `stream`, prepared and read back on the host."""

import functools
import secrets

import numpy as np
from keras import ops

from keras_gen import backend
from keras_gen.generation import prompts as prompts_lib
from keras_gen.generation.stop_conditions import StopConditions
from keras_gen.processors.structured_output import StructuredOutput
from keras_gen.processors.triggered import Triggered
from keras_gen.streaming.assistant_message import assistant_message
from keras_gen.streaming.generation_output import GenerationOutput
from keras_gen.streaming.incremental_detokenizer import IncrementalDetokenizer
from keras_gen.streaming.reasoning_splitter import reply_thinking
from keras_gen.streaming.tool_call_parser import ToolCallParser

# Stop ids enter the program as a fixed-size tensor padded with -1, so a
# different set of stop ids (up to this many) does not recompile.
STOP_TOKEN_SLOTS = 8
MIN_CACHE_LENGTH = 32
MIN_PREFILL_LENGTH = 16


def _check_stop_token_ids(stop_token_ids, vocabulary_size):
    stop_token_ids = list(stop_token_ids)
    for token in stop_token_ids:
        if not 0 <= token < vocabulary_size:
            raise ValueError(
                "`stop_token_ids` must be token ids in "
                f"[0, {vocabulary_size}). Received: {stop_token_ids}"
            )
    if len(stop_token_ids) > STOP_TOKEN_SLOTS:
        raise ValueError(
            f"`stop_token_ids` takes at most {STOP_TOKEN_SLOTS} ids. "
            f"Received {len(stop_token_ids)}."
        )
    return [int(t) for t in stop_token_ids]


def _stop_token_ids(config, tokenizer):
    """What ends a row: `stop_token_ids` if set, else the end tokens of the
    options (`eos_token_id`) or of the tokenizer."""
    if config.stop_token_ids is not None:
        return config.stop_token_ids
    if config.eos_token_id is not None:
        return config.eos_token_id
    return getattr(tokenizer, "eos_token_ids", None) or []


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
        self, lm, inputs, config, sampler, processors, seed=None, chat=None,
        tool_choice=None,
    ):  # fmt: skip
        self.tokenizer = lm.tokenizer
        backbone = lm.backbone
        self.outputs = config.outputs
        self.top_logprobs = config.top_logprobs
        prompts = self._read_prompts(
            inputs, config, sampler, backbone.vocabulary_size, chat, tool_choice
        )
        limit = backbone.max_sequence_length
        self.ends = prompts_lib.row_ends(
            prompts, config.max_length, config.max_new_tokens, self.width, limit
        )
        self.stop_token_ids = _check_stop_token_ids(
            _stop_token_ids(config, self.tokenizer), backbone.vocabulary_size
        )
        # A sampler that returns `n` sequences per prompt (beam search).
        n = sampler.num_return_sequences
        self.row_prompts = [prompt for prompt in prompts for _ in range(n)]
        self.row_ends = [end for end in self.ends for _ in range(n)]
        self.vocabulary_size = backbone.vocabulary_size
        self.num_prompts = len(prompts) // self.prompt_repeats
        self.processors = tuple(
            self._after_thinking(p).for_request(self) for p in processors
        )
        keys = [p.state_key for p in self.processors if p.state_key is not None]
        if len(keys) != len(set(keys)):
            raise ValueError(
                "A call takes one structured output: give each prompt its own "
                "constraint with `StructuredOutput([...])` instead of several "
                "processors."
            )
        stop_strings = config.stop_strings
        if self.form in (prompts_lib.CHAT, prompts_lib.CHATS):
            # A template without an end token (the default one) ends a reply
            # where the next turn would start.
            stop_strings = (
                *(stop_strings or ()),
                *self.tokenizer.chat_template.stop_strings,
            )
        self.stop_conditions = StopConditions(
            config.stop_sequences,
            stop_strings or None,
            self.tokenizer,
            backbone.vocabulary_size,
        )
        self.include_stop_string = bool(config.include_stop_string)
        self.cache_length = prompts_lib.bucket(max(self.ends), MIN_CACHE_LENGTH, limit)
        self.prefill_length = min(
            self.cache_length,
            prompts_lib.bucket(max(map(len, prompts)), MIN_PREFILL_LENGTH),
        )
        self.prompts = prompts
        self.seed = _seed(seed)
        self._sampler = sampler
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

    @functools.cached_property
    def program_inputs(self):
        """The compiled program's inputs, a dict of tensors."""
        token_ids, mask = prompts_lib.pack(self.prompts, self.cache_length)
        stop_slots = self.stop_token_ids + [-1] * (
            STOP_TOKEN_SLOTS - len(self.stop_token_ids)
        )
        return {
            "token_ids": ops.convert_to_tensor(token_ids, "int32"),
            "padding_mask": ops.convert_to_tensor(mask, "bool"),
            "end": ops.convert_to_tensor(np.asarray(self.ends, "int32")),
            "stop_token_ids": ops.convert_to_tensor(stop_slots, "int32"),
            "seed": ops.convert_to_tensor(self.seed, "int32"),
            "sampler": self._sampler.get_parameter_tensors(),
            "processors": [p.get_parameter_tensors() for p in self.processors],
            **self.stop_conditions.program_inputs(),
        }

    def _read_prompts(
        self, inputs, config, sampler, vocabulary_size, chat, tool_choice
    ):
        """The program's prompts; sets the input's form and width, and the
        output rows per prompt."""
        prompts, self.form, self.width = prompts_lib.read_prompts(
            inputs, self.tokenizer, chat
        )
        prompts_lib.check_prompts(prompts, vocabulary_size)
        # Per prompt of a chat whose template thinks, whether its reply
        # starts inside the thinking (else `None`); the reader of the
        # replies' tool calls.
        self.thinking = [None] * len(prompts)
        self.tool_parser = None
        if self.form in (prompts_lib.CHAT, prompts_lib.CHATS):
            source = self.tokenizer.chat_template.source
            if (chat or {}).get("tools") and tool_choice != "none":
                self.tool_parser = ToolCallParser.for_template(source)
            self.thinking = [
                reply_thinking(
                    source, self.tokenizer.decode(p, skip_special_tokens=False)
                )
                for p in prompts
            ]
        n = config.num_return_sequences or 1
        # How many program rows run each prompt (before beam search's own).
        self.prompt_repeats = 1
        if sampler.num_return_sequences != 1 or n == 1:
            self.rows_per_prompt = sampler.num_return_sequences
            return prompts
        # `n` samples per prompt: each prompt runs `n` times.
        if sampler.deterministic:
            raise ValueError(
                f"`num_return_sequences={n}` needs sampling or beam search: "
                f"{type(sampler).__name__} would return {n} equal sequences."
            )
        self.rows_per_prompt = self.prompt_repeats = n
        return [prompt for prompt in prompts for _ in range(n)]

    def _after_thinking(self, processor):
        """A structured output for a chat whose template thinks: each
        prompt's constraint applies once the reply's thinking ends."""
        if not isinstance(processor, StructuredOutput) or all(
            t is None for t in self.thinking
        ):
            return processor
        constraints = processor.per_prompt(len(self.thinking))
        return StructuredOutput(
            [
                c if c is None or t is None else Triggered.after_thinking(c, t)
                for c, t in zip(constraints, self.thinking)
            ]
        )

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
        token_ids = backend.to_numpy(outputs["token_ids"])
        if "lengths" in outputs:
            limits = [int(n) for n in backend.to_numpy(outputs["lengths"])]
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
                window = backend.to_numpy(outputs[name][:, low:high])
                if name.startswith("top_"):  # the buffer holds the most asked
                    window = window[..., : self.top_logprobs]
                setattr(
                    record,
                    name,
                    [window[r, a - low : b - low] for r, (a, b) in enumerate(spans)],
                )
        for name in ("accepted_tokens", "draft_tokens"):
            if name in outputs:
                counts = backend.to_numpy(outputs[name])
                setattr(record, name, [int(n) for n in counts])
        if self.tokenizer is not None:
            record.text = [self._text(r, ids) for r, ids in enumerate(record.token_ids)]
        if "sequence_scores" in outputs:
            # NaN: a stream's row whose search still runs.
            record.sequence_scores = [
                None if np.isnan(score) else score
                for score in backend.to_numpy(outputs["sequence_scores"]).tolist()
            ]
        if self.done:
            record.sequences = [
                prompt + token_ids[r, len(prompt) : self.emitted[r]].tolist()
                for r, prompt in enumerate(self.row_prompts)
            ]
            if self.form in (prompts_lib.CHAT, prompts_lib.CHATS):
                record.messages = [
                    assistant_message(
                        text, self.thinking[r // self.rows_per_prompt], self.tool_parser
                    )
                    for r, text in enumerate(self.shown_text)
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
        is a list of `n`, best first; a dict answer stays flat. A
        conversation's answer is the reply's text.
        """
        if self.form in (prompts_lib.CHAT, prompts_lib.CHATS):
            rows = record.text
        elif self.form in (prompts_lib.TEXT, prompts_lib.TEXTS):
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
