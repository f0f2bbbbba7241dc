"""Turning a growing list of token ids into text, piece by piece."""


class IncrementalDetokenizer:
    """Decodes one row's tokens as they arrive, never emitting half a character.

    Byte-level BPE can split one UTF-8 character over several tokens, and
    decoding a token alone can lose the space or the continuation marker it
    shares with its neighbour. So each new piece is decoded together with a
    few tokens before it, and held back while it ends in the replacement
    character `\\ufffd` (an incomplete multi-byte character). `finalize`
    flushes the rest; the joined segments equal `tokenizer.decode` of all
    the tokens.

    Args:
        tokenizer: anything with `decode(token_ids) -> str`.
        prompt: token ids that come before the new tokens. They are not
            emitted, but give the first new tokens their context (a
            tokenizer may drop the leading space of a sequence's first word).
        context: how many earlier tokens to decode with each new piece.

    Examples:
    >>> class Letters:
    ...     def decode(self, ids):
    ...         return "".join(chr(97 + i) for i in ids)
    >>> detokenizer = IncrementalDetokenizer(Letters())
    >>> detokenizer.add_tokens([0, 1])
    'ab'
    >>> detokenizer.add_tokens([2]) + detokenizer.finalize()
    'c'
    """

    def __init__(self, tokenizer, prompt=(), context=4):
        self.tokenizer = tokenizer
        self.context = context
        self.tokens = [int(t) for t in prompt]
        self.prompt_text = tokenizer.decode(self.tokens) if self.tokens else ""
        self.text = ""
        self.last_segment = ""
        # Tokens before `read_offset` are decoded already; decoding starts
        # from `prefix_offset` to give the tokenizer context.
        self.read_offset = len(self.tokens)
        self.prefix_offset = max(self.read_offset - context, 0)

    def add_tokens(self, token_ids):
        """Add new tokens; return the text that is now complete."""
        self.tokens.extend(int(t) for t in token_ids)
        return self._read(hold=True)

    def finalize(self):
        """The text not emitted yet, so that all segments join to the whole."""
        return self._read(hold=False)

    def _read(self, hold):
        """Emit what the tokens past `read_offset` add to the text decoded
        from `prefix_offset`: cut by length, not matched, so that bytes
        that are not UTF-8 (each a `\ufffd`, merging differently as more
        arrive) lose no text. With `hold`, nothing while the text ends in
        an incomplete character."""
        if len(self.tokens) == self.read_offset:
            return self._emit("")
        decode = self.tokenizer.decode
        prefix = decode(self.tokens[self.prefix_offset : self.read_offset])
        text = decode(self.tokens[self.prefix_offset :])
        if (hold and text.endswith("\ufffd")) or len(text) <= len(prefix):
            return self._emit("")
        self.prefix_offset = max(len(self.tokens) - self.context, 0)
        self.read_offset = len(self.tokens)
        return self._emit(text[len(prefix) :])

    def _emit(self, segment):
        self.text += segment
        self.last_segment = segment
        return segment
