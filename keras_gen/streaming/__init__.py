"""Streaming: records, streamers and incremental detokenization."""

from keras_gen.streaming.async_iterator_streamer import AsyncIteratorStreamer
from keras_gen.streaming.base_streamer import BaseStreamer
from keras_gen.streaming.generation_output import GenerationOutput
from keras_gen.streaming.incremental_detokenizer import IncrementalDetokenizer
from keras_gen.streaming.iterator_streamer import IteratorStreamer
from keras_gen.streaming.text_streamer import TextStreamer

# The name a stream's items go by; the same record type as the final result.
GenerationChunk = GenerationOutput
