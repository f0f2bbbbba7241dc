import asyncio
import io
import threading

import pytest

from keras_gen.streaming import AsyncIteratorStreamer
from keras_gen.streaming import BaseStreamer
from keras_gen.streaming import GenerationOutput
from keras_gen.streaming import IteratorStreamer
from keras_gen.streaming import TextStreamer

PROMPTS = [[5, 9, 2], [7]]


class Collector(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], 0

    def put(self, chunk):
        self.chunks.append(chunk)

    def end(self):
        self.ended += 1


def test_generate_puts_every_chunk_and_ends_once(gpt2_lm):
    streamer = Collector()
    result = gpt2_lm.generate(
        PROMPTS, max_new_tokens=9, streamer=streamer, return_dict=True
    )
    assert streamer.ended == 1 and len(streamer.chunks) >= 3
    assert GenerationOutput.join(streamer.chunks).token_ids == result.token_ids
    assert result.sequences == gpt2_lm.generate(PROMPTS, max_new_tokens=9)


def test_a_raising_streamer_stops_generation_and_still_ends(gpt2_lm):
    class Failing(Collector):
        def put(self, chunk):
            super().put(chunk)
            raise RuntimeError("client went away")

    streamer = Failing()
    with pytest.raises(RuntimeError, match="client went away"):
        gpt2_lm.generate(PROMPTS, max_new_tokens=20, streamer=streamer)
    assert len(streamer.chunks) == 1 and streamer.ended == 1


def test_text_streamer_prints_token_ids_without_a_tokenizer(gpt2_lm):
    buffer = io.StringIO()
    gpt2_lm.generate(
        PROMPTS, max_new_tokens=5, streamer=TextStreamer(file=buffer, row=1)
    )
    new = gpt2_lm.generate(PROMPTS, max_new_tokens=5, strip_prompt=True)[1]
    assert buffer.getvalue() == "".join(f" {t}" for t in new) + "\n"


def test_iterator_streamer_from_a_thread(gpt2_lm):
    streamer = IteratorStreamer(timeout=60)
    thread = threading.Thread(
        target=gpt2_lm.generate,
        args=(PROMPTS,),
        kwargs={"max_new_tokens": 7, "streamer": streamer},
    )
    thread.start()
    chunks = list(streamer)
    thread.join()
    joined = GenerationOutput.join(chunks)
    expected = gpt2_lm.generate(PROMPTS, max_new_tokens=7, strip_prompt=True)
    assert joined.token_ids == expected


def test_async_iterator_streamer(gpt2_lm):
    async def main():
        streamer = AsyncIteratorStreamer(timeout=60)
        loop = asyncio.get_running_loop()
        task = loop.run_in_executor(
            None,
            lambda: gpt2_lm.generate(PROMPTS, max_new_tokens=6, streamer=streamer),
        )
        chunks = [chunk async for chunk in streamer]
        return chunks, await task

    chunks, result = asyncio.run(main())
    joined = GenerationOutput.join(chunks)
    assert [p + t for p, t in zip(PROMPTS, joined.token_ids)] == result
