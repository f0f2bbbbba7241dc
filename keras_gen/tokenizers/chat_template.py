"""Chat messages to a prompt (or a training text), with the model's jinja2
chat template."""

import datetime
import json

import jinja2
import jinja2.ext
import jinja2.sandbox
import numpy as np

# For models without a template (the demo model): plain "Role: text" lines.
DEFAULT_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ message['role'] | capitalize }}: {{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)
# Where a reply written with the default template ends.
DEFAULT_STOP_STRINGS = ("\nUser:", "\nSystem:")


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # jinja2's own `tojson` escapes HTML characters; templates expect JSON.
    return json.dumps(
        value,
        ensure_ascii=ensure_ascii,
        indent=indent,
        separators=separators,
        sort_keys=sort_keys,
    )


def _strftime_now(format):
    return datetime.datetime.now().strftime(format)


# Names of special tokens a template may read (`{{ bos_token }}`).
SPECIAL_TOKENS = ("bos", "eos", "unk", "pad", "sep", "cls", "mask")


def _plain(value, where):
    """`value` rebuilt from JSON types only: what a template may see (a
    subclass's methods, such as numpy's, stay out of the sandbox)."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, bool):
        return value
    for kind, plain in (
        (str, str.__str__),
        (int, int.__int__),
        (float, float.__float__),
    ):
        if isinstance(value, kind):
            return plain(value)
    if isinstance(value, dict):
        return {str(key): _plain(item, where) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item, where) for item in value]
    raise TypeError(
        f"{where} must hold JSON values (dicts, lists, strings, numbers, "
        f"booleans). Received a {type(value).__name__}: {value!r:.200}"
    )


def check_messages(messages, where="`messages`"):
    """`messages` as plain dicts, keys with `None` values dropped (as
    OpenAI's clients send `"tool_calls": None`), or a `TypeError`."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise TypeError(
            f"{where} must be a non-empty list of messages. Received: {messages!r:.200}"
        )
    checked = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise TypeError(
                f"{where}[{i}] must be a dict with a 'role' (and its 'content'). "
                f"Received: {message!r:.200}"
            )
        plain = _plain(message, f"{where}[{i}]")
        checked.append(
            {key: value for key, value in plain.items() if value is not None}
        )
    return checked


def is_conversation(inputs):
    """Whether `inputs` is one conversation: a list of message dicts."""
    return (
        isinstance(inputs, (list, tuple))
        and bool(inputs)
        and all(isinstance(message, dict) for message in inputs)
    )


def is_conversations(inputs):
    """Whether `inputs` is a batch of conversations."""
    return (
        isinstance(inputs, (list, tuple))
        and bool(inputs)
        and all(is_conversation(conversation) for conversation in inputs)
    )


class ChatTemplate:
    """Renders chat messages into one prompt string.

    Uses the `chat_template` of the model's `tokenizer_config.json` (a
    string, or a list of named templates of which "default" is used) or
    `chat_template.jinja`, the way transformers' `apply_chat_template`
    renders it: a sandboxed jinja2 environment (with `trim_blocks`,
    `lstrip_blocks` and loop controls) that sees `messages`, `tools`,
    `documents`, `add_generation_prompt`, the special tokens' text
    (`bos_token`, `eos_token`, ...), any extra keywords (such as
    `enable_thinking`), and the helpers `raise_exception`, `strftime_now`
    and a `tojson` filter that writes JSON (not HTML-escaped). Models
    without a template get `DEFAULT_CHAT_TEMPLATE`, and their replies stop
    at the next `"\\nUser:"`.

    Args:
        template: the template source, or `None` for the default.
        bos_token: str, the model's begin token text (`""` if none).
        eos_token: str, the model's end token text (`""` if none).
        origin: where the template comes from (a file), named in errors.
        special_tokens: dict, more special tokens' text by name
            (`{"pad_token": "<pad>"}`).

    Raises:
        TypeError: the template is not a string.
        ValueError: it is not valid jinja2 (the message has the line).

    Examples:
    >>> ChatTemplate().render([{"role": "user", "content": "Hi"}])
    'User: Hi\\nAssistant:'
    """

    def __init__(
        self,
        template=None,
        bos_token="",
        eos_token="",
        origin=None,
        special_tokens=None,
    ):
        where = f" of {origin}" if origin else ""
        if template is not None and not isinstance(template, str):
            raise TypeError(
                f"The chat template{where} must be a string (or a list of "
                f"{{'name', 'template'}} objects). Received: {template!r:.200}"
            )
        self.is_default = template is None
        self.source = DEFAULT_CHAT_TEMPLATE if template is None else template
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols]
        )
        environment.filters["tojson"] = _tojson
        environment.globals["raise_exception"] = _raise_exception
        environment.globals["strftime_now"] = _strftime_now
        try:
            self.template = environment.from_string(self.source)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(
                f"The chat template{where} is not valid jinja2: {error.message} "
                f"(line {error.lineno})."
            ) from None
        self.special_tokens = {
            **{key: value for key, value in (special_tokens or {}).items() if value},
            "bos_token": bos_token or "",
            "eos_token": eos_token or "",
        }

    @property
    def bos_token(self):
        return self.special_tokens["bos_token"]

    @property
    def eos_token(self):
        return self.special_tokens["eos_token"]

    @classmethod
    def from_tokenizer(cls, tokenizer, origin=None):
        """The template of a `keras_gen.tokenizers.Tokenizer`'s config
        (`origin`: the file it was read from, named in errors). Special
        tokens' text comes from the config (`"bos_token"`, ...), else from
        the tokenizer's ids."""
        config = getattr(tokenizer, "config", {}) or {}
        template = config.get("chat_template")
        if isinstance(template, list):
            if not all(isinstance(t, dict) for t in template):
                raise TypeError(
                    f"The chat templates{f' of {origin}' if origin else ''} must "
                    "be objects with a 'name' and a 'template'. Received: "
                    f"{template!r:.200}"
                )
            named = {t.get("name"): t.get("template") for t in template}
            template = named.get("default") or next(iter(named.values()), None)

        def text(name):
            token = config.get(f"{name}_token")
            token = token.get("content") if isinstance(token, dict) else token
            if isinstance(token, str):
                return token
            token_id = getattr(tokenizer, f"{name}_token_id", None)
            if token_id is None:
                return ""
            return tokenizer.id_to_token(token_id) or ""

        tokens = {f"{name}_token": text(name) for name in SPECIAL_TOKENS}
        return cls(
            template,
            bos_token=tokens.pop("bos_token"),
            eos_token=tokens.pop("eos_token"),
            origin=origin,
            special_tokens=tokens,
        )

    @property
    def stop_strings(self):
        """Strings that end a reply: only for the default template."""
        return DEFAULT_STOP_STRINGS if self.is_default else ()

    def render(
        self,
        messages,
        add_generation_prompt=True,
        tools=None,
        documents=None,
        **template_kwargs,
    ):
        """The prompt for `messages` (dicts with "role" and "content").

        Args:
            messages: list of message dicts; keys holding `None` are dropped.
            add_generation_prompt: bool, end with the start of the
                assistant's turn.
            tools: `None` or a list of tool (function) JSON schemas, in
                OpenAI's `{"type": "function", "function": {...}}` form.
            documents: `None` or a list of dicts, for templates that read
                documents.
            **template_kwargs: more variables for the template, such as
                `enable_thinking=False`; they override the special tokens'.

        Raises:
            TypeError: a message, tool or keyword is not plain JSON data.
            ValueError: the template raised an error (its message).
        """
        if tools is not None and (
            not isinstance(tools, (list, tuple))
            or not all(isinstance(tool, dict) for tool in tools)
        ):
            raise TypeError(
                "`tools` must be a list of JSON schema dicts (OpenAI's "
                '`{"type": "function", "function": {"name": ..., "parameters": '
                f"...}}}}`). Received: {tools!r:.200}"
            )
        variables = {
            **self.special_tokens,
            **_plain(template_kwargs, "the template's keywords"),
            "messages": check_messages(messages),
            "tools": _plain(tools, "`tools`"),
            "documents": _plain(documents, "`documents`"),
            "add_generation_prompt": bool(add_generation_prompt),
        }
        try:
            return self.template.render(**variables)
        except jinja2.exceptions.TemplateError as error:
            raise ValueError(f"The chat template failed: {error}") from None

    def segments(self, messages):
        """`render(messages)` cut into `(text, is_reply)` pieces, for
        training on the assistant's replies only.

        A reply's piece is what the template writes after the generation
        prompt of the messages before it, up to the end of that reply (its
        end token included): what the model generates when it answers.

        Raises:
            ValueError: the template renders an earlier conversation as
                something other than the start of a longer one, so replies
                cannot be told apart from prompts.
        """
        pieces, done = [], ""
        for i, message in enumerate(messages):
            if message.get("role") != "assistant":
                continue
            before = self.render(messages[:i], add_generation_prompt=True)
            after = self.render(messages[: i + 1], add_generation_prompt=False)
            if not (before.startswith(done) and after.startswith(before)):
                raise ValueError(
                    "The chat template does not render a conversation as the "
                    "start of its continuation, so its replies cannot be told "
                    "from its prompts: train with `mask_prompt=False`."
                )
            pieces += [(before[len(done) :], False), (after[len(before) :], True)]
            done = after
        text = self.render(messages, add_generation_prompt=False)
        if not text.startswith(done):
            raise ValueError(
                "The chat template renders the whole conversation differently "
                "from its parts: train with `mask_prompt=False`."
            )
        pieces.append((text[len(done) :], False))
        return [(piece, is_reply) for piece, is_reply in pieces if piece]
