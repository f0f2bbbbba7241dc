"""Chat messages to a prompt (or a training text), with the model's jinja2
chat template."""

import jinja2
import jinja2.sandbox

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


class ChatTemplate:
    """Renders chat messages into one prompt string.

    Uses the `chat_template` of the model's `tokenizer_config.json` (a
    string, or a list of named templates of which "default" is used), the
    way transformers' `apply_chat_template` does: a sandboxed jinja2
    environment with `messages`, `add_generation_prompt`, `bos_token`,
    `eos_token` and `raise_exception`. Models without a template get
    `DEFAULT_CHAT_TEMPLATE`, and their replies stop at the next
    `"\\nUser:"`.

    Args:
        template: the template source, or `None` for the default.
        bos_token: str, the model's begin token text (`""` if none).
        eos_token: str, the model's end token text (`""` if none).
        origin: where the template comes from (a file), named in errors.

    Raises:
        TypeError: the template is not a string.
        ValueError: it is not valid jinja2 (the message has the line).

    Examples:
    >>> ChatTemplate().render([{"role": "user", "content": "Hi"}])
    'User: Hi\\nAssistant:'
    """

    def __init__(self, template=None, bos_token="", eos_token="", origin=None):
        where = f" of {origin}" if origin else ""
        if template is not None and not isinstance(template, str):
            raise TypeError(
                f"The chat template{where} must be a string (or a list of "
                f"{{'name', 'template'}} objects). Received: {template!r:.200}"
            )
        self.is_default = template is None
        self.source = DEFAULT_CHAT_TEMPLATE if template is None else template
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True
        )
        environment.globals["raise_exception"] = _raise_exception
        try:
            self.template = environment.from_string(self.source)
        except jinja2.TemplateSyntaxError as error:
            raise ValueError(
                f"The chat template{where} is not valid jinja2: {error.message} "
                f"(line {error.lineno})."
            ) from None
        self.bos_token = bos_token or ""
        self.eos_token = eos_token or ""

    @classmethod
    def from_tokenizer(cls, tokenizer, origin=None):
        """The template of a `keras_gen.tokenizers.Tokenizer`'s config
        (`origin`: the file it was read from, named in errors)."""
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

        def text(token_id):
            if token_id is None:
                return ""
            return tokenizer.id_to_token(token_id) or ""

        return cls(
            template,
            bos_token=text(getattr(tokenizer, "bos_token_id", None)),
            eos_token=text(getattr(tokenizer, "eos_token_id", None)),
            origin=origin,
        )

    @property
    def stop_strings(self):
        """Strings that end a reply: only for the default template."""
        return DEFAULT_STOP_STRINGS if self.is_default else ()

    def render(self, messages, add_generation_prompt=True):
        """The prompt for `messages` (dicts with "role" and "content")."""
        return self.template.render(
            messages=messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
        )

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
