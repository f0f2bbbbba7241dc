"""One OpenAI-style completion or chat request, read and checked."""

from keras_gen.generation.generation_config import MAX_TOP_LOGPROBS
from keras_gen.generation.generation_config import OPTIONS
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.processors.response_format import from_response_format
from keras_gen.processors.triggered import Triggered
from keras_gen.serving import chat_tools
from keras_gen.serving.api_error import APIError
from keras_gen.streaming.reasoning_splitter import reply_thinking

MAX_STOP_STRINGS = 4
MAX_LOGPROBS = 5
# OpenAI's range of a `logit_bias` value.
MAX_LOGIT_BIAS = 100
# The most numbers a request's per-token scores or logits may add up to
# (`n` x tokens x vocabulary, each output): bounded before it is paid.
MAX_VOCABULARY_OUTPUTS = 1 << 22
# Request fields that give a generation option as it is: field -> option.
OPTION_FIELDS = {meta["field"]: name for name, meta in OPTIONS.items() if meta["field"]}
# Per-token outputs a choice may carry (the request's `output_scores` and
# `output_logits`): one array of `vocabulary_size` numbers per token.
VOCABULARY_OUTPUTS = ("scores", "logits")
# vLLM's structured output fields: `structured_outputs` (an object) and
# the older `guided_*` ones, by the key they set in it.
GUIDED_FIELDS = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
}


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _field(body, name, check, expected, default=None):
    """`body[name]` (or `default` when absent or null), checked."""
    value = body.get(name)
    if value is None:
        return default
    if not check(value):
        raise APIError(
            f"Invalid value for '{name}': expected {expected}, got {value!r}.",
            param=name,
            code="invalid_value" if _is_number(value) else "invalid_type",
        )
    return value


def _number(body, name, low, high, default, low_open=False):
    def check(v):
        return _is_number(v) and (v > low if low_open else v >= low) and v <= high

    bound = f"{'>' if low_open else '>='} {low} and <= {high}"
    return _field(body, name, check, f"a number {bound}", default)


def _count(body, name, low, high, default):
    return _field(
        body,
        name,
        lambda v: _is_int(v) and low <= v <= high,
        f"an integer in [{low}, {high}]",
        default,
    )


class CompletionRequest:
    """A validated `/v1/completions` or `/v1/chat/completions` body.

    Reads every field the server supports, checks types and ranges (an
    `APIError` names the field at fault) and tokenizes the prompt(s).

    Supported fields: `model`, `prompt` (completions: a string, a list of
    strings, a list of token ids or a list of such lists) or `messages`
    (chat), `max_tokens` (chat also `max_completion_tokens`),
    `temperature` (0 is greedy), `top_p`, `top_k`, `min_p`, `stop`, `seed`,
    `n`, `logprobs` (completions: an int, top alternatives per token; chat:
    a bool with `top_logprobs`), `presence_penalty`, `frequency_penalty`,
    `repetition_penalty`, `logit_bias`, `stream`,
    `stream_options.include_usage`, `response_format` (`json_object` and
    `json_schema`), and vLLM's `ignore_eos`, `min_tokens`,
    `stop_token_ids`, `structured_outputs` (`json`, `regex`, `choice`,
    `json_object`) and `guided_json`, `guided_regex` and `guided_choice`;
    transformers' `typical_p`, `no_repeat_ngram_size`, `min_length`,
    `bad_words_ids` and `forced_eos_token_id`; `output_scores` and
    `output_logits` (each choice then carries `scores` or `logits`: per
    token, the `vocabulary_size` processed scores or raw logits);
    llama.cpp's `cache_prompt` (`false`: the prompt neither reuses nor
    leaves blocks in the prefix cache); and the
    server's registered processors, selected by `processors` (an object
    from a name to an object of its arguments) or by vLLM's `vllm_xargs`
    (an object whose keys are `"<name>.<argument>"`, or an argument name
    that one registered processor takes). vLLM's `use_beam_search: true`
    and grammars are refused (400). Other fields are ignored.

    The options become `config`, a `GenerationConfig` (which checks every
    value) of what the request sets; the engine puts it over the server's
    defaults (the model's `generation_config.json`, as vLLM reads it, then
    OpenAI's temperature of 1).

    Args:
        body: the decoded JSON object.
        kind: `"completion"` or `"chat"`.
        model: the served model's context: needs `name`, `tokenizer`,
            `vocabulary_size`, `context_length` (prompt plus completion),
            `max_batch_size` (the most `n`),
            `end_token_ids` and `processors` (the engine's registered ones).
    """

    def __init__(self, body, kind, model):
        if not isinstance(body, dict):
            raise APIError("The request body must be a JSON object.")
        self.kind = kind
        self.model_name = _field(
            body, "model", lambda v: isinstance(v, str), "a string"
        )
        if self.model_name is None:
            raise APIError("You must provide a model parameter.", param="model")
        if self.model_name != model.name:
            raise APIError(
                f"The model '{self.model_name}' does not exist. This server "
                f"serves '{model.name}'.",
                status=404,
                param="model",
                code="model_not_found",
            )
        stop_strings = list(self._read_prompts(body, model))
        self.n = _count(body, "n", 1, model.max_batch_size, 1)
        self.stream = _field(
            body, "stream", lambda v: isinstance(v, bool), "a boolean", False
        )
        options = _field(
            body, "stream_options", lambda v: isinstance(v, dict), "an object", {}
        )
        self.include_usage = bool(options.get("include_usage"))
        self.ignore_eos = _field(
            body, "ignore_eos", lambda v: isinstance(v, bool), "a boolean", False
        )
        if _field(
            body, "use_beam_search", lambda v: isinstance(v, bool), "a boolean", False
        ):
            # Refused, not ignored: sampling instead would be a silent
            # wrong answer.
            raise APIError(
                "Beam search is not served: the engine decodes every request "
                "in one shared step with per-row sampling settings. Run beam "
                "search with `CausalLM.generate` or `CausalLM.stream` and a "
                "`BeamSampler`.",
                param="use_beam_search",
            )
        self._read_max_tokens(body, model)
        self._read_logprobs(body)
        self.stop = tuple(self._read_stop(body)) + tuple(stop_strings)
        self.config = self._read_options(body, model)
        self.outputs = [
            name
            for name in VOCABULARY_OUTPUTS
            if getattr(self.config, f"output_{name}")
        ]
        numbers = len(self.rows) * self.max_tokens * model.vocabulary_size
        if self.outputs and numbers * len(self.outputs) > MAX_VOCABULARY_OUTPUTS:
            raise APIError(
                f"'output_{self.outputs[0]}' returns {model.vocabulary_size} numbers "
                f"per token: {numbers * len(self.outputs)} for this request, more "
                f"than the {MAX_VOCABULARY_OUTPUTS} a request may ask for. Lower "
                "'max_tokens' or 'n'.",
                param=f"output_{self.outputs[0]}",
            )
        self.processors = self._read_processors(body, model.processors)

    def _read_prompts(self, body, model):
        """Sets `self.prompts` (token id lists), `self.thinking` and the
        chat's tools (`self.tool_parser`, `self.tool_constraint`); yields
        template stop strings."""
        self.thinking = self.tool_parser = self.tool_constraint = None
        if self.kind == "chat":
            messages = chat_tools.read_messages(body.get("messages"))
            template = model.tokenizer.chat_template
            tools, self.tool_parser, self.tool_constraint = chat_tools.read_tools(
                body, template.source
            )
            keywords = _field(
                body,
                "chat_template_kwargs",
                lambda v: isinstance(v, dict),
                "an object",
                {},
            )
            try:
                text = model.tokenizer.apply_chat_template(
                    messages, tokenize=False, tools=tools, **keywords
                )
            except (TypeError, ValueError) as error:  # the template's own errors
                raise APIError(str(error), param="messages") from None
            self.prompts = [model.tokenizer.encode(text, add_special_tokens=False)]
            # Templates that think: whether a reply starts inside the tags.
            self.thinking = reply_thinking(template.source, text)
            yield from template.stop_strings
            return
        prompt = body.get("prompt")
        if prompt is None:
            raise APIError("Missing required parameter: 'prompt'.", param="prompt")
        if isinstance(prompt, str):
            texts = [prompt]
        elif (
            isinstance(prompt, list)
            and prompt
            and all(isinstance(p, str) for p in prompt)
        ):
            texts = prompt
        elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
            texts, self.prompts = None, [prompt]
        elif (
            isinstance(prompt, list)
            and prompt
            and all(
                isinstance(p, list) and p and all(_is_int(t) for t in p) for p in prompt
            )
        ):
            texts, self.prompts = None, prompt
        else:
            raise APIError(
                "'prompt' must be a string, an array of strings, an array of "
                "token ids or an array of token id arrays.",
                param="prompt",
                code="invalid_type",
            )
        if texts is not None:
            self.prompts = [model.tokenizer.encode(t) for t in texts]
        for row in self.prompts:
            if not row:
                raise APIError("'prompt' must not be empty.", param="prompt")
            if any(not 0 <= t < model.vocabulary_size for t in row):
                raise APIError(
                    f"Token ids in 'prompt' must be in [0, {model.vocabulary_size}).",
                    param="prompt",
                )

    def _read_max_tokens(self, body, model):
        longest = max(len(p) for p in self.prompts)
        room = model.context_length - longest
        if room < 1:
            raise APIError(
                f"This model's maximum context length is {model.context_length} "
                f"tokens, and the prompt has {longest}.",
                param="messages" if self.kind == "chat" else "prompt",
                code="context_length_exceeded",
            )
        name = "max_tokens"
        if self.kind == "chat" and body.get("max_completion_tokens") is not None:
            name = "max_completion_tokens"
        default = 16 if self.kind == "completion" else room
        self.max_tokens = _field(
            body, name, lambda v: _is_int(v) and v >= 1, "a positive integer", default
        )
        if longest + self.max_tokens > model.context_length:
            raise APIError(
                f"This model's maximum context length is {model.context_length} "
                f"tokens. However, you requested {longest + self.max_tokens} "
                f"tokens ({longest} in the prompt, {self.max_tokens} for the "
                f"completion). Please reduce '{name}'.",
                param=name,
                code="context_length_exceeded",
            )

    def _read_logprobs(self, body):
        """`self.logprobs`: `None` (off) or how many alternatives per token."""
        if self.kind == "completion":
            self.logprobs = _count(body, "logprobs", 0, MAX_LOGPROBS, None)
            return
        wanted = _field(
            body, "logprobs", lambda v: isinstance(v, bool), "a boolean", False
        )
        top = _count(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, 0)
        if top and not wanted:
            raise APIError(
                "'top_logprobs' needs 'logprobs' set to true.", param="top_logprobs"
            )
        self.logprobs = top if wanted else None

    def _read_stop(self, body):
        stop = body.get("stop")
        if stop is None:
            return []
        if isinstance(stop, str):
            stop = [stop]
        if (
            not isinstance(stop, list)
            or not all(isinstance(s, str) and s for s in stop)
            or len(stop) > MAX_STOP_STRINGS
        ):
            raise APIError(
                f"'stop' must be a non-empty string or an array of at most "
                f"{MAX_STOP_STRINGS} non-empty strings.",
                param="stop",
            )
        return stop

    def _read_options(self, body, model):
        """The request's generation options, checked by `GenerationConfig`."""
        options = {
            option: body[field]
            for field, option in OPTION_FIELDS.items()
            if body.get(field) is not None
        }
        # vLLM's convention: top_k of 0 or -1 means no top-k filter.
        if options.get("top_k") == -1:
            options["top_k"] = 0
        logit_bias = self._read_logit_bias(body, model)
        if logit_bias:
            options["logit_bias"] = logit_bias
        extra = _field(
            body,
            "stop_token_ids",
            lambda v: isinstance(v, list) and all(_is_int(t) for t in v),
            "an array of token ids",
            [],
        )
        if extra or self.ignore_eos:
            ends = [] if self.ignore_eos else list(model.end_token_ids)
            options["stop_token_ids"] = ends + extra
        field, response_format = self._read_response_format(body)
        options.update(
            response_format=response_format,
            max_new_tokens=self.max_tokens,
            stop_strings=list(self.stop) or None,
            output_log_probs=self.logprobs is not None or None,
            top_logprobs=self.logprobs or None,
        )
        fields = {option: field for field, option in OPTION_FIELDS.items()}
        fields["stop_token_ids"] = "stop_token_ids"
        fields["response_format"] = field
        try:
            return GenerationConfig(
                **{k: v for k, v in options.items() if v is not None}
            )
        except (TypeError, ValueError) as error:
            name = next((n for n in options if f"`{n}`" in str(error)), None)
            raise APIError(
                f"Invalid value: {error}",
                param=fields.get(name, name),
                code=(
                    "invalid_type" if isinstance(error, TypeError) else "invalid_value"
                ),
            ) from None

    def _read_response_format(self, body):
        """`(field, value)`: the request's structured output, as the field
        that set it and a `response_format` option (`(None, None)`)."""
        given = {}

        def is_object(value):
            return isinstance(value, dict)

        response_format = _field(body, "response_format", is_object, "an object")
        if response_format is not None and response_format.get("type") != "text":
            given["response_format"] = response_format
        structured = _field(body, "structured_outputs", is_object, "an object")
        if structured is not None:
            keys = ("json", "regex", "choice", "json_object", "grammar")
            given["structured_outputs"] = {
                k: v for k, v in structured.items() if k in keys
            }
        for name, key in GUIDED_FIELDS.items():
            if body.get(name) is not None:
                given[name] = {key: body[name]}
        if body.get("guided_json_object"):  # an older vLLM spelling
            given["guided_json_object"] = {"json_object": True}
        # A forced call is the reply's structure; calls the model may make
        # are held to their schemas unless the request gives another.
        tools = self.tool_constraint
        if tools is not None and (tools.required or not given):
            given["tool_choice"] = tools
        if len(given) > 1:
            raise APIError(
                f"Give one structured output: received {sorted(given)}.",
                param=sorted(given)[1],
            )
        if not given:
            return None, None
        ((field, value),) = given.items()
        if isinstance(value, dict) and value.get("grammar") is not None:
            raise APIError(
                "Grammars are not supported: give a JSON schema, a regex or a choice.",
                param=field,
            )
        if self.thinking is None:
            return field, value
        try:
            value = from_response_format(value)
        except (TypeError, ValueError) as error:
            raise APIError(f"Invalid value: {error}", param=field) from None
        if value is not None:  # the answer after the thinking
            value = Triggered.after_thinking(value, self.thinking)
        return field, value

    def _read_processors(self, body, registered):
        """The registered processors the request selects: `{name:
        arguments}`, or `None`."""
        chosen = {}

        def is_arguments(value):
            return isinstance(value, dict) and all(
                isinstance(v, dict) for v in value.values()
            )

        own = _field(
            body, "processors", is_arguments, "an object of argument objects", {}
        )
        for name, arguments in own.items():
            if name not in registered:
                raise APIError(
                    f"Unknown processor '{name}': this server runs "
                    f"{sorted(registered)}.",
                    param="processors",
                )
            chosen[name] = dict(arguments)

        def is_xargs(value):
            return isinstance(value, dict) and all(
                _is_number(v) or isinstance(v, (str, bool)) for v in value.values()
            )

        xargs = _field(
            body, "vllm_xargs", is_xargs, "an object of numbers and strings", {}
        )
        for key, value in xargs.items():
            name, _, argument = key.rpartition(".")
            names = [
                n
                for n, processor in registered.items()
                if (not name or n == name) and argument in processor.get_config()
            ]
            if len(names) != 1:
                arguments = {n: sorted(p.get_config()) for n, p in registered.items()}
                raise APIError(
                    f"'vllm_xargs' key '{key}' must name one argument of one "
                    f"registered processor ('<name>.<argument>' or an argument "
                    f"one of them takes): {arguments}.",
                    param="vllm_xargs",
                )
            chosen.setdefault(names[0], {})[argument] = value
        return chosen or None

    def _read_logit_bias(self, body, model):
        """OpenAI's `logit_bias`: token id strings to biases in [-100, 100]."""

        def check(bias):
            return isinstance(bias, dict) and all(
                isinstance(k, str)
                and k.isdigit()
                and int(k) < model.vocabulary_size
                and _is_number(v)
                and abs(v) <= MAX_LOGIT_BIAS
                for k, v in bias.items()
            )

        expected = (
            f"an object mapping token ids in [0, {model.vocabulary_size}) to "
            f"numbers in [-{MAX_LOGIT_BIAS}, {MAX_LOGIT_BIAS}]"
        )
        bias = _field(body, "logit_bias", check, expected, {})
        return {int(k): float(v) for k, v in bias.items()}

    @property
    def rows(self):
        """Rows this request adds to a batch: each prompt `n` times."""
        return [prompt for prompt in self.prompts for _ in range(self.n)]
