"""Printing text as it is generated."""

import sys

from keras_gen.streaming.base_streamer import BaseStreamer


class TextStreamer(BaseStreamer):
    """Writes one row's new text to a file (stdout by default) as it arrives.

    Args:
        file: a text file object; `None` means `sys.stdout` at write time.
        row: which row of the batch to print. With no tokenizer, the new
            token ids are printed instead of text.

    Examples:
    >>> import io
    >>> buffer = io.StringIO()
    >>> streamer = TextStreamer(file=buffer)
    """

    def __init__(self, file=None, row=0):
        self.file = file
        self.row = row

    def put(self, chunk):
        file = self.file or sys.stdout
        if chunk.text is not None:
            piece = chunk.text[self.row]
        else:
            piece = "".join(f" {t}" for t in chunk.token_ids[self.row])
        if piece:
            file.write(piece)
            file.flush()

    def end(self):
        file = self.file or sys.stdout
        file.write("\n")
        file.flush()
