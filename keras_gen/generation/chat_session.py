"""A conversation with a model that keeps its history.

Nothing here imports Keras at import time (the `keras-gen` command reads
`DEFAULT_REPLY_TOKENS` for its help).
"""

# The reply's room when no option sets it: at most this many tokens, and
# at most a quarter of the context is kept free for it when old turns are
# dropped.
DEFAULT_REPLY_TOKENS = 256


class ChatSession:
    """A conversation that keeps its history: each `send` (or `stream`)
    adds the user's message and the model's reply (the assistant message of
    `GenerationOutput.messages`: a thinking template's reasoning apart from
    its content).

    The prompt is the whole history rendered with the model's chat template
    (`lm.generate(messages)`). When it no longer leaves room for a reply in
    the model's context, the oldest turns are dropped (the system message
    stays) and `dropped` counts them.

    Args:
        lm: a `keras_gen.CausalLM` with a tokenizer.
        system: `None` or the system message's text.
        generation_config: a `GenerationConfig` (or dict) for every reply.
        **options: `GenerationConfig` fields for every reply
            (`max_new_tokens`, `temperature`, `seed`, ...). Without
            `max_new_tokens` (or `max_length`) here or in the model's
            generation config, a reply may take up to 256 tokens, as the
            context allows.

    Examples:
    >>> import keras_gen
    >>> session = ChatSession(keras_gen.CausalLM.from_preset("demo"), seed=0)
    >>> reply = session.send("What is a class?")
    >>> [message["role"] for message in session.messages]
    ['user', 'assistant']
    """

    def __init__(self, lm, system=None, generation_config=None, **options):
        from keras_gen.generation import options as options_lib

        if lm.tokenizer is None:
            raise ValueError("A chat needs a model with a tokenizer.")
        if system is not None and not isinstance(system, str):
            raise TypeError(f"`system` must be a string. Received: {system!r:.200}")
        self.lm = lm
        self.system = system
        self.options = options_lib.call_options(generation_config, options)
        self.dropped = 0
        self.clear()

    def clear(self):
        """Start over (the system message stays)."""
        self.messages = []

    def send(self, text):
        """The reply to `text` (the history grows by both)."""
        return "".join(chunk.text[0] for chunk in self.stream(text))

    def stream(self, text):
        """`GenerationOutput` chunks of the reply to `text`; the history
        gets the reply when the stream ends (or is left early)."""
        if not isinstance(text, str) or not text:
            raise ValueError(
                f"A message must be non-empty text. Received: {text!r:.200}"
            )
        self.messages.append({"role": "user", "content": text})
        try:
            options = self._fit()
        except ValueError:
            self.messages.pop()
            raise
        reply, message = [], None
        try:
            for chunk in self.lm.stream(self._conversation(), self.options, **options):
                reply.append(chunk.text[0])
                message = chunk.messages[0] if chunk.messages else None
                yield chunk
        finally:
            # The whole reply's message (its reasoning apart), or what came
            # of a reply left early.
            message = message or {"role": "assistant", "content": "".join(reply)}
            self.messages.append(message)

    def _conversation(self):
        return self._with_system(self.messages)

    def _with_system(self, messages):
        system = [{"role": "system", "content": self.system}] if self.system else []
        return system + messages

    def _fit(self):
        """Drop the oldest turns until the prompt leaves the reply room;
        the reply's length option when none is set."""
        config = self.lm.generation_config.merge(self.options)
        context = self.lm.backbone.max_sequence_length
        unset = config.max_new_tokens is None and config.max_length is None
        room = (
            min(DEFAULT_REPLY_TOKENS, context // 4)
            if unset
            else config.max_new_tokens or 1
        )

        def length(messages):
            return len(
                self.lm.tokenizer.apply_chat_template(self._with_system(messages))
            )

        alone = length(self.messages[-1:])
        if alone + (1 if config.max_length else room) > context:
            raise ValueError(
                f"The message takes {alone} tokens with the chat template, "
                f"leaving no room for a reply in the model's context of {context}."
            )
        while length(self.messages) + room > context:
            del self.messages[:2]  # the oldest user message and its reply
            self.dropped += 2
        if unset:
            return {
                "max_new_tokens": min(
                    DEFAULT_REPLY_TOKENS, context - length(self.messages)
                )
            }
        return {}
