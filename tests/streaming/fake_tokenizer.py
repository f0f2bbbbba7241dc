"""A byte-level tokenizer whose tokens split multi-byte characters."""

TEXT = "héllo wörld 😀 ça va? 日本"


class ByteTokenizer:
    """Token i < 256 is byte i; higher ids are two-byte pairs from `merges`.

    Emoji and accented letters span several tokens, so decoding a token
    alone gives half a character.
    """

    def __init__(self, eos_token_ids=None):
        self.eos_token_ids = eos_token_ids
        self.vocabulary_size = 256

    def encode(self, text):
        return list(text.encode("utf-8"))

    def decode(self, token_ids):
        return bytes(token_ids).decode("utf-8", errors="replace")
