"""A reply's reasoning apart from its answer, as the text streams."""

START, END = "<think>", "</think>"


class ReasoningSplitter:
    """Splits a reply's text into reasoning and content, chunk by chunk.

    Models whose chat templates think (Qwen3, QwQ, DeepSeek-R1) write
    `<think>...</think>` before the answer; some templates open the tag in
    the prompt, so the reply starts inside it. Text inside the tags is
    reasoning, the rest content; the tags and the whitespace right after
    them are dropped. A tag split across chunks is held back until it is
    certain, so no tag text ever leaks into either part.

    Args:
        thinking: bool, whether the reply starts inside the tags (the
            prompt opened them).

    Examples:
    >>> splitter = ReasoningSplitter()
    >>> splitter.feed("<think>\\nfirst, 2 + 2</thi")
    ('first, 2 + 2', '')
    >>> splitter.feed("nk>\\n\\nIt is 4.")
    ('', 'It is 4.')
    """

    def __init__(self, thinking=False):
        self.state = "thinking" if thinking else "before"
        self.held = ""
        self.after_tag = thinking  # drop the whitespace that follows a tag

    def feed(self, text):
        """`(reasoning, content)`: what `text` adds to each, as far as is
        certain."""
        text, self.held = self.held + text, ""
        reasoning = content = ""
        while text:
            if self.after_tag:
                text = text.lstrip()
                self.after_tag = not text
                continue
            if self.state == "before":
                stripped = text.lstrip()
                if stripped.startswith(START):
                    text, self.state, self.after_tag = (
                        stripped[len(START) :],
                        "thinking",
                        True,
                    )
                elif START.startswith(stripped):  # may still open
                    self.held, text = text, ""
                else:
                    self.state = "content"
            elif self.state == "thinking":
                end = text.find(END)
                if end >= 0:
                    reasoning += text[:end]
                    text, self.state, self.after_tag = (
                        text[end + len(END) :],
                        "content",
                        True,
                    )
                else:
                    keep = partial_tag_length(text, END)
                    reasoning += text[: len(text) - keep]
                    self.held, text = text[len(text) - keep :], ""
            else:
                content, text = content + text, ""
        return reasoning, content

    def finish(self):
        """`(reasoning, content)` of what was held back when the reply ends."""
        held, self.held = self.held, ""
        if self.state == "thinking":
            return held, ""
        return "", held


def reply_thinking(template_source, prompt_text):
    """Whether a reply to `prompt_text` thinks: `True` when the prompt
    opened the tags (the reply starts inside them), `False` when the reply
    may open them, `None` when the template does not think (writes no
    `</think>`) or the prompt ends with the tags closed (thinking turned
    off, as Qwen3's `enable_thinking=False`)."""
    if END not in template_source or prompt_text.rstrip().endswith(END):
        return None
    return prompt_text.rfind(START) > prompt_text.rfind(END)


def partial_tag_length(text, tag):
    """The length of the longest end of `text` that begins `tag` (what a
    stream holds back: the tag may be arriving)."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if tag.startswith(text[-size:]):
            return size
    return 0
