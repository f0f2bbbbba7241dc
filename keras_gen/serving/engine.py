"""Continuous batching: one compiled step shared by every running request."""

import collections
import concurrent.futures
import contextlib
import contextvars
import functools
import math
import secrets
import threading
import time

import keras
import numpy as np
from keras import ops

from keras_gen import backend
from keras_gen import processors as processors_lib
from keras_gen import samplers
from keras_gen.generation import options as options_lib
from keras_gen.generation import prompts as prompts_lib
from keras_gen.generation.generation_config import MAX_TOP_LOGPROBS
from keras_gen.generation.generation_config import OPTIONS
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.generation.generation_request import MIN_CACHE_LENGTH
from keras_gen.generation.generation_request import MIN_PREFILL_LENGTH
from keras_gen.generation.generation_request import STOP_TOKEN_SLOTS
from keras_gen.generation.generation_request import GenerationRequest
from keras_gen.generation.program_cache import ProgramCache
from keras_gen.kernels.automaton import words
from keras_gen.kernels.constraint_tables import FREE
from keras_gen.kernels.constraint_tables import MAX_KEY
from keras_gen.kernels.constraint_tables import ConstraintTables
from keras_gen.models.causal_lm import checked_speculation
from keras_gen.processors import StructuredOutput
from keras_gen.samplers.sampler import ROW_STRIDE
from keras_gen.samplers.speculative_decoding import SPECULATIVE_TOKENS
from keras_gen.samplers.speculative_decoding import SpeculativeSampler
from keras_gen.serving import engine_programs
from keras_gen.serving.engine_metrics import EngineMetrics
from keras_gen.serving.generation_handle import GenerationHandle
from keras_gen.serving.prefix_cache import PrefixCache
from keras_gen.serving.processor_lanes import ProcessorLanes
from keras_gen.utils.checks import MAX_NGRAM_SIZE
from keras_gen.utils.checks import MAX_SPECULATIVE_TOKENS
from keras_gen.utils.checks import check_count
from keras_gen.utils.checks import check_int
from keras_gen.utils.checks import check_number
from keras_gen.utils.tunable import parameter_dtype

# Options the engine's step does not run: when each one is asked for, and
# what to use instead. Beam and contrastive search keep several candidate
# rows per request and reorder them every step: each is its own loop, not
# one step over independent slots.
UNSUPPORTED = {
    "num_beams": (lambda v: v > 1, "beam search runs with `CausalLM.generate`"),
    "penalty_alpha": (
        lambda v: v > 0,
        "contrastive search runs with `CausalLM.generate`",
    ),
}
# Lanes for the processor options, made by the options mapping from each
# option's example value (each slot then holds its own).
OPTION_LANES = {
    name: meta["example"]
    for name, meta in OPTIONS.items()
    if meta["example"] is not None
}
# Per-step outputs the wide decode program writes (`(slots, chunk, vocab)`
# rings), run only while a request asks for one of them.
WIDE_OUTPUTS = ("scores", "logits", "hidden_states")


# The time a decode chunk aims at when `chunk_size` is not set, and its
# most steps; the chunk is longer (up to `MAX_CHUNK_SECONDS`) where the
# host's work between two chunks (inputs, delivery) would take more than
# `HOST_SHARE` of it (GPT-2 small on 2 cores: a 40 ms step, 3-8 ms between
# chunks).
CHUNK_SECONDS = 0.05
MAX_CHUNK_SECONDS = 0.2
MAX_CHUNK_STEPS = 32
HOST_SHARE = 0.05
# The default size of the structured-output tables: every running
# request's automaton together (a JSON object over the demo's 2,048 tokens
# takes 1,623 states and 167,331 transitions). Fewer states for large
# vocabularies: the table of allowed tokens stays within
# `CONSTRAINT_BYTES` (a state holds a bit per token).
CONSTRAINT_STATES = 8192
# The longest prefill chunk (see `Engine.prefill_chunk_tokens`), how long
# prefill may pause decoding, in decode chunks (`Engine.prefill_pause`),
# and the most bytes the prefix cache takes by default. Measured (jax, 2
# cores; `benchmark_serving.py --scenario long-prompt`): a 2,000-token
# prompt among 7 streams on GPT-2 small costs their inter-token latency
# p99 2.6-2.9x idle with a pause of 1 (its own first token after 22 s),
# 3.3x with 2 (8.4 s), 36.6x prefilled whole (4.1 s).
PREFILL_CHUNK_TOKENS = 256
PREFILL_PAUSE = 1.0
# Short prompts (of at most SHORT_PROMPT_TOKENS) waiting together are
# prefilled ADMIT_ROWS to a program call: a call reads every weight once,
# whatever its rows.
ADMIT_ROWS = 4
SHORT_PROMPT_TOKENS = 32
PREFIX_CACHE_BYTES = 1 << 30
# The most prefix-cache blocks one program copies into or out of a slot.
BLOCK_GROUP = 16
CONSTRAINT_TRANSITIONS = 1 << 20
CONSTRAINT_BYTES = 64 << 20


class EngineFull(RuntimeError):
    """`Engine.submit` found the waiting queue full (the server's 429)."""


class EngineClosed(RuntimeError):
    """The engine was closed before the request could finish."""


class _PrefillBudget:
    """How long prefill may run before the next decode chunk: `chunk`
    seconds (about a decode chunk's time), stretched while the rows waiting
    for their prompts outnumber the rows that chunk would serve (the
    running ones and those prefilled since): a burst of requests gets its
    first tokens sooner, a lone long prompt pauses decoding no longer."""

    def __init__(self, chunk, running=1, waiting=0):
        self.chunk, self.running, self.waiting = chunk, running, waiting
        self.spent = 0.0

    def left(self):
        return self.chunk * max(1.0, self.waiting / self.running) - self.spent

    def spend(self, seconds, rows=0):
        """Count `seconds` of prefill that finished `rows` prompts."""
        self.spent += seconds
        self.waiting -= rows
        self.running += rows


class _Job:
    """A submitted request: its reader, handle, rows and timings."""

    def __init__(
        self,
        reader,
        handle,
        settings,
        lanes,
        max_time,
        automaton=None,
        cache_prompt=True,
    ):
        self.reader = reader
        self.handle = handle
        self.settings = settings
        self.lanes = lanes  # its processors, matched to the engine's lanes
        self.max_time = max_time
        self.automaton = automaton  # its structured output, or None
        self.cache_prompt = cache_prompt  # reuses and keeps cached prefixes
        self.slots = []
        # Per row, the prompt positions its slot's cache holds so far
        # (`None` before the prefix cache was asked); running once all are.
        self.filled = [None] * handle.rows
        self.prefilling = True
        self.submitted = self.admitted = time.perf_counter()
        self.last_delivery = [None] * handle.rows

    @property
    def rows(self):
        return self.handle.rows


class Engine:
    """Serves many requests at once from one compiled decode step.

    The engine holds `max_batch_size` slots: the rows of one fixed-shape
    key/value cache of `max_length` positions. A background thread runs
    one compiled program over the occupied slots, a chunk of steps at a time.
    Between chunks it admits waiting requests into free slots, prefills
    their prompts, hands out what each running request produced, and frees
    the slots of finished or cancelled ones.

    A prompt's cache rows are seeded without touching other rows, in
    chunks of at most `prefill_chunk_tokens` positions (one program per
    chunk length bucket and, past the first chunk, length bucket of the
    positions it attends to). While requests decode, the prefill chunks run
    between two decode chunks take about `prefill_pause` decode chunks'
    time (by each program's measured time; at least one chunk): a long
    prompt does not stall the running requests for its whole prefill, and
    a queue of short prompts is admitted many at a time: those of at most
    32 tokens that wait together go four to a program call (a call reads
    every weight once, whatever its rows). Prompts begin
    where a cached prefix ends: the prefix cache keeps the key/value rows
    of the prompts (and completions) the engine computed, in blocks of 16
    tokens keyed by every token up to the block's end, and copies a
    prompt's longest cached run of blocks into its slot instead of
    computing them. A
    request's tokens do not depend on a hit (its log-probs differ by float
    rounding at most: the reused rows were computed in other chunks).

    The decode step is `generate`'s: the same `Sampler` loop over
    `CausalLM.next`, with one position per slot, and the same sampler and
    logits processor classes, bound to each slot's own numbers (see
    `keras_gen.utils.tunable.Tunable`). A request's options become a
    sampler and processors exactly as in `generate`
    (`keras_gen.generation.options`); every processor an option makes runs in
    the engine (penalties, biases, bans, minimum lengths, n-gram bans, the
    forced end token, structured output), as do temperature (0 decodes
    greedily), top-k, top-p, min-p and typical sampling, and the processors
    registered with `processors`. Each runs only while a running request
    uses it. Structured outputs (`response_format`) share one set of padded
    automaton tables, rebuilt when a request brings a new one and never
    smaller than before. Stop strings and sequences and `max_time` are
    matched on the host between chunks. After `warm_up`, no request
    compiles anything (but a request whose padded id lists outgrow every
    earlier one's compiles the larger size once).

    A request's tokens are those `lm.generate` gives it alone: they do not
    depend on the other requests, on its slot or on when it arrived (random
    draws are keyed by its seed, its row and the position). A request
    without a seed gets a fresh one. Options come from the request over
    the engine's `generation_config` (by default `lm.generation_config`);
    the compiled sampler and processors of `lm` are not used. Beam search
    and contrastive search stay with `lm.generate`: each keeps rows of a
    request in step with one another.

    Speculative decoding by prompt lookup runs in the shared step of an
    engine made with `num_speculative_tokens`: each step, a request that
    sets `prompt_lookup_ngram` proposes up to its `num_speculative_tokens`
    (at most the engine's) tokens, those that followed the latest earlier
    occurrence of its last n-gram, and keeps the ones the model verifies,
    beside rows that do not speculate (one token per step each). While a
    running request speculates the engine runs a speculative decode
    program (one per row and length bucket, compiled at warm-up). Its
    tokens are those `lm.generate(..., prompt_lookup_ngram=...)` gives
    with its `num_speculative_tokens`: greedy ones those of plain
    decoding, sampled ones from the same distribution.

    An engine made with a `draft_model` speculates with it for every
    request instead: the draft's key/value cache layers sit beside the
    model's in each slot (prefilled, copied from the prefix cache and
    stepped with them), each step drafts the engine's
    `num_speculative_tokens` for every running row, and each request keeps
    up to its own `num_speculative_tokens`. Its tokens are those of
    `lm.generate(..., draft_model=...)` with that count.

    Args:
        lm: a `keras_gen.models.CausalLM`.
        max_batch_size: int, slots (rows decoded together).
        max_length: int, prompt plus new tokens a request may reach; by
            default the model's context (at most 2048). Rounded up to a
            power of two: the cache's length.
        chunk_size: int, steps between two admissions and deliveries; by
            default as many as take about `CHUNK_SECONDS` (measured as it
            runs), so that a new request never waits long for the running
            chunk to end, and fast models do not pay a host round trip per
            step; more (up to `MAX_CHUNK_SECONDS`) where the host's work
            between two chunks would take over `HOST_SHARE` of a chunk.
        max_queue: int or `None`, requests that may wait for a slot;
            `submit` raises `EngineFull` beyond.
        top_logprobs: int, the most alternatives a request may ask for.
        generation_config: a `GenerationConfig` (or dict): the options of a
            request that sets none; by default `lm.generation_config`.
        constraint_states: int, the structured-output states the engine's
            tables hold (every running request's automaton together); by
            default `CONSTRAINT_STATES`, fewer for vocabularies so large
            that their table of allowed tokens would pass
            `CONSTRAINT_BYTES`.
        constraint_transitions: int, their token transitions. The tables
            are this large from the start, so that structured requests
            never change a program's shapes (nothing compiles after
            `warm_up`); a request whose automaton does not fit beside the
            running ones fails alone.
        processors: a dict from a name to a `LogitsProcessor` class or
            instance (your own included): processors a request may select
            (`submit(..., processors=...)`). Each runs in the step with its
            class and configuration; its tunable numbers are each request's
            own. An instance gives the configuration (and the numbers of
            slots that do not use it); a class is made with no arguments.
        prefix_cache_bytes: int, host memory the prefix cache may take (0
            turns it off); by default as much as the engine's key/value
            cache, at most `PREFIX_CACHE_BYTES` (1 GiB). A request with
            `cache_prompt=False` neither reuses nor leaves cached blocks.
        prefill_chunk_tokens: int, the most prompt positions one prefill
            chunk computes (at least 16; the longest chunk program); by
            default `PREFILL_CHUNK_TOKENS`.
        prefill_pause: float, while requests decode, how long the prefill
            chunks between two decode chunks may take, in decode chunks
            (at least one chunk runs), times the waiting rows per running
            row where more wait than run: the default 1 at most about
            doubles the running requests' gaps between tokens while a
            long prompt prefills; more prefills it sooner, `float("inf")`
            prefills every admitted prompt before the next decode chunk.
        num_speculative_tokens: int or `None`, the most tokens a request's
            prompt lookup (or the draft model) may propose per step (at
            most 32). `None`, the default, compiles no speculative program
            (with a draft model: 4), and a request that asks for
            `prompt_lookup_ngram` is refused.
        draft_model: `None`, or a smaller `CausalLM` (or its `Backbone`)
            with `lm`'s vocabulary and at least `max_length` positions,
            that drafts for every request (which may not then ask for
            `prompt_lookup_ngram`). Its cache rows add its share of the
            key/value cache's memory.

    Examples:
    >>> with Engine(lm, max_batch_size=8) as engine:  # doctest: +SKIP
    ...     handle = engine.submit("The for statement", max_new_tokens=32)
    ...     for chunk in handle:
    ...         print(chunk.text[0], end="")
    ...     records = engine.generate(["A class", "The while"], do_sample=True)
    """

    def __init__(
        self,
        lm,
        max_batch_size=8,
        max_length=None,
        chunk_size=None,
        max_queue=None,
        top_logprobs=MAX_TOP_LOGPROBS,
        generation_config=None,
        processors=None,
        constraint_states=None,
        constraint_transitions=CONSTRAINT_TRANSITIONS,
        prefix_cache_bytes=None,
        prefill_chunk_tokens=PREFILL_CHUNK_TOKENS,
        prefill_pause=PREFILL_PAUSE,
        num_speculative_tokens=None,
        draft_model=None,
    ):
        self.lm = lm
        self.generation_config = (
            lm.generation_config
            if generation_config is None
            else GenerationConfig.from_dict(generation_config)
        )
        self.num_slots = check_count("max_batch_size", max_batch_size)
        self.chunk_size = check_count("chunk_size", chunk_size, allow_none=True)
        # Measured: a decode step's program (speculative or not), the
        # host's work around a decode chunk, and each prefill program's call.
        self._step_seconds, self._prefill_seconds = {}, {}
        self._host_seconds = 0.0
        self.max_queue = (
            None if max_queue is None else check_count("max_queue", max_queue)
        )
        # There are no more alternatives than tokens.
        self.top_logprobs = min(
            check_count("top_logprobs", top_logprobs), lm.backbone.vocabulary_size
        )
        limit = lm.backbone.max_sequence_length
        if max_length is None:
            max_length = min(limit or 2048, 2048)
        max_length = check_count("max_length", max_length)
        if limit is not None and max_length > limit:
            raise ValueError(
                f"`max_length`={max_length} is beyond the model's {limit} positions."
            )
        self.max_length = max_length
        self.cache_length = prompts_lib.bucket(max_length, MIN_CACHE_LENGTH, limit)
        speculation = checked_speculation(draft_model, num_speculative_tokens, None)
        speculation.check(lm.backbone)
        self._draft = speculation.draft
        draft_limit = self._draft and self._draft.max_sequence_length
        if draft_limit is not None and max_length > draft_limit:
            raise ValueError(
                f"`max_length`={max_length} is beyond the draft model's "
                f"{draft_limit} positions."
            )
        if self._draft is not None and num_speculative_tokens is None:
            num_speculative_tokens = SPECULATIVE_TOKENS
        self.num_speculative_tokens = check_int(
            "num_speculative_tokens",
            num_speculative_tokens,
            1,
            MAX_SPECULATIVE_TOKENS,
            allow_none=True,
        )
        # Positions past a row's end that a speculative step writes (and the
        # cache and token buffers hold): it verifies a few ahead.
        self._lookahead = (
            self.num_speculative_tokens + 1 if self.num_speculative_tokens else 0
        )
        self.prefill_chunk_tokens = check_count(
            "prefill_chunk_tokens", prefill_chunk_tokens
        )
        if self.prefill_chunk_tokens < MIN_PREFILL_LENGTH:
            raise ValueError(
                f"`prefill_chunk_tokens` must be >= {MIN_PREFILL_LENGTH}. "
                f"Received: prefill_chunk_tokens={prefill_chunk_tokens}"
            )
        self.prefill_pause = check_number(
            "prefill_pause", prefill_pause, low=0, allow_inf=(float("inf"),)
        )
        if prefix_cache_bytes is None:
            prefix_cache_bytes = min(self._cache_bytes, PREFIX_CACHE_BYTES)
        self.prefix_cache = PrefixCache(
            check_int("prefix_cache_bytes", prefix_cache_bytes, low=0)
        )
        # Per-step outputs are rings of the most steps a chunk runs (or
        # the tokens of one speculative step).
        self._ring = max(self.chunk_size or MAX_CHUNK_STEPS, self._lookahead)
        self.processors = _registered(processors)
        self._sampler = samplers.RandomSampler(
            **{name: options_lib.NEUTRAL[name] for name in options_lib.FILTERS}
        )
        self._speculative_sampler = None
        if self.num_speculative_tokens:
            self._speculative_sampler = SpeculativeSampler(
                self._sampler,
                lm.backbone,
                self.num_speculative_tokens,
                draft=self._draft,
                prompt_lookup_ngram=None if self._draft else MAX_NGRAM_SIZE,
            )
        option_lanes = options_lib.build_processors(
            GenerationConfig(**OPTION_LANES), complete=True
        )
        self._lanes = ProcessorLanes(
            [*self.processors.values(), *option_lanes], self.num_slots
        )
        self.metrics = EngineMetrics()
        self.compilations = 0  # programs the step thread traced or compiled
        self._condition = threading.Condition()
        self._waiting = collections.deque()
        self._jobs = []  # admitted and not yet finished
        self._free = list(range(self.num_slots))
        self._closed = False
        # (wide_outputs, background, future) for the step thread
        self._warm_up = None
        self._numbers = self._empty_numbers()
        self._host = self._empty_host_arrays()
        self._device = None  # the cache, allocated by the step thread
        # Every program a warm-up builds (with and without the wide
        # outputs, speculative or not), twice over: table and lane sizes
        # add a few.
        buckets = len(self.row_buckets) * len(self.length_buckets)
        buckets *= 2 if self.num_speculative_tokens else 1
        self.programs = ProgramCache(
            4 * (2 * buckets + 3 * len(self.prompt_buckets) + 2)
        )
        # The running requests' automata, packed in tables of a fixed size,
        # and their device copies.
        vocabulary_size = lm.backbone.vocabulary_size
        if constraint_states is None:
            constraint_states = min(
                CONSTRAINT_STATES,
                MAX_KEY // vocabulary_size,
                CONSTRAINT_BYTES // (4 * words(vocabulary_size)),
            )
        self.constraint_capacity = (
            check_count("constraint_states", constraint_states),
            check_count("constraint_transitions", constraint_transitions),
        )
        self._tables = ConstraintTables(
            [], vocabulary_size, capacity=self.constraint_capacity
        )
        self._table_tensors = None
        # Keras keeps the distribution per thread: the step thread runs under
        # the creator's (slots split over its data axis).
        self._distribution = keras.distribution.distribution()
        # torch keeps its compiler settings in context variables, which a
        # new thread starts without: the step thread runs in a copy of the
        # creator's context (a compilation cache turned off stays off).
        self._thread = threading.Thread(
            target=contextvars.copy_context().run,
            args=(self._run,),
            name="keras-gen-engine",
            daemon=True,
        )
        self._thread.start()

    # The client side.

    def submit(self, prompt, generation_config=None, processors=None, **options):
        """Queue one prompt; returns its `GenerationHandle` at once.

        Args:
            prompt: a string (with a tokenizer) or a list of token ids.
            generation_config: a `GenerationConfig` or dict of options.
            processors: the registered processors this request runs: a dict
                from a name of the engine's `processors` to the keyword
                arguments of its class (`{}` for its defaults), or a list of
                `LogitsProcessor`s of a registered class and configuration.
                They apply before the processors of the options, as
                `generate(..., processors=...)` applies them.
            **options: `GenerationConfig` fields, over `generation_config`.
                `num_return_sequences=n` runs the prompt in `n` slots.
        """
        if self._closed:
            raise EngineClosed("The engine is closed.")
        job = self._prepare(prompt, generation_config, options, processors)
        with self._condition:
            if self._closed:
                raise EngineClosed("The engine is closed.")
            if self.max_queue is not None and len(self._waiting) >= self.max_queue:
                raise EngineFull(
                    f"{len(self._waiting)} requests are waiting for a slot "
                    f"(`max_queue`={self.max_queue}); try again later."
                )
            self._waiting.append(job)
            self.metrics.waiting.set(len(self._waiting))
            self._condition.notify_all()
        return job.handle

    def generate(self, prompts, generation_config=None, processors=None, **options):
        """Run a batch of prompts of any size; records in input order.

        `generation_config` is one config (or dict) for every prompt, or a
        list of them, one per prompt; `processors` as in `submit`, for
        every prompt. Prompts beyond the free slots wait and run as slots
        free.
        """
        if isinstance(prompts, str) or (
            prompts and not isinstance(prompts[0], (str, list, tuple, np.ndarray))
        ):
            prompts = [prompts]
        configs = generation_config
        if not isinstance(configs, (list, tuple)):
            configs = [configs] * len(prompts)
        if len(configs) != len(prompts):
            raise ValueError(
                f"Got {len(configs)} generation configs for {len(prompts)} prompts."
            )
        handles = [
            self._submit_waiting(prompt, config, processors, options)
            for prompt, config in zip(prompts, configs)
        ]
        return [handle.result() for handle in handles]

    def _submit_waiting(self, prompt, config, processors, options):
        # An offline batch waits for room in the queue instead of failing.
        while True:
            try:
                return self.submit(prompt, config, processors, **options)
            except EngineFull:
                time.sleep(0.01)

    def close(self, timeout=30):
        """Stop the step thread; unfinished requests end with `EngineClosed`
        at once, even while a step (or a compile) still runs: the thread
        then ends after it, within `timeout` seconds if it can."""
        with self._condition:
            self._closed = True
            self._condition.notify_all()
            handles = [job.handle for job in [*self._jobs, *self._waiting]]
            warm_up, self._warm_up = self._warm_up, None
        for handle in handles:
            handle.finish(EngineClosed("The engine was closed."))
        if warm_up is not None:
            warm_up[-1].set_exception(EngineClosed("The engine was closed."))
        self._thread.join(timeout)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    @property
    def running(self):
        """How many requests hold slots."""
        return len(self._jobs)

    @property
    def waiting(self):
        """How many requests wait for a slot."""
        return len(self._waiting)

    @property
    def stats(self):
        """Slots, running and waiting requests, compilations so far, and
        whether a step still compiles in the background."""
        return {
            "slots": self.num_slots,
            "running": self.running,
            "waiting": self.waiting,
            "compilations": self.compilations,
            "compiling": self.compiling,
        }

    @property
    def row_buckets(self):
        """The slot counts a decode program runs over (powers of two, and
        every slot): the occupied slots decide which runs, so a lone
        request does not pay for the empty ones. Where each shape compiles
        a step of its own (torch, see `backend.compiles_each_shape`), every
        slot: a few rows cost hardly more than one."""
        if backend.compiles_each_shape():
            return [self.num_slots]
        return _buckets(1, self.num_slots)

    @property
    def prompt_buckets(self):
        """The padded lengths of prompt chunks: one admit program each, and
        an extend program per length bucket it may attend to."""
        return _buckets(
            MIN_PREFILL_LENGTH, min(self.prefill_chunk_tokens, self.cache_length)
        )

    @property
    def length_buckets(self):
        """The cache lengths a decode program attends over: the longest
        running request decides which runs. From
        `backend.shortest_cache_bucket()`; on torch one compiled step serves
        them all (see `engine_programs.decode`). None spans half the cache
        or more: reading a span out of the cache copies it (XLA), which
        costs more than attending to the whole cache (measured: 16 rows
        of GPT-2 small at 128 of 256 positions, 10% more op time a step)."""
        buckets = _buckets(backend.shortest_cache_bucket(), self.cache_length)
        return [b for b in buckets if 2 * b < self.cache_length] + buckets[-1:]

    def warm_up(self, wide_outputs=False, background=False):
        """Compile every program now (the admit program of each prompt
        bucket, the decode program of each row and length bucket), so that
        no request waits for a compile. Call it before submitting requests.

        `wide_outputs=True` also compiles the decode programs that write
        per-step `scores`, `logits` and `hidden_states` (run while a request
        asks for one of them).

        `background=True` (torch): return once every program can run, and
        compile the decode step on a thread of its own; until it is ready,
        requests run the step eagerly (the demo's: about 4x slower), and
        `compiling` is true. JAX and TensorFlow compile whole programs, so
        there it changes nothing."""
        # The step thread compiles them: it runs them later, and what a
        # compiled step guards on (Keras' and torch's settings) is per thread.
        done = concurrent.futures.Future()
        with self._condition:
            if self._jobs or self._waiting:
                raise RuntimeError("`warm_up` runs before any request is submitted.")
            if self._closed:
                raise EngineClosed("The engine was closed.")
            if self._warm_up is not None:
                raise RuntimeError("Another `warm_up` call is running.")
            self._warm_up = (wide_outputs, background, done)
            self._condition.notify_all()
        done.result()

    @property
    def compiling(self):
        """Whether a step that `warm_up(background=True)` left compiling (in
        this process) is not ready yet: requests meanwhile run it eagerly."""
        return backend.background_compiles() > 0

    def _compile_all(self, wide_outputs, background):
        with backend.warming_up(background):
            # Each prefill program runs twice: the second call's time says
            # how many chunks fit between two decode chunks.
            for bucket in self.prompt_buckets:
                starts = [attended - bucket for attended in self.length_buckets]
                for start in [0, *(start for start in starts if start > 0)] * 2:
                    self._prefill_chunk(0, start, bucket)
            for bucket in self._short_buckets * 2:
                self._admit_rows(("admit", (ADMIT_ROWS, bucket)), [0], [bucket])
            self._write_blocks(0, 0, self._read_blocks(0, 0))
            for wide in (False, True) if wide_outputs else (False,):
                for speculative in (False, True)[: 1 + bool(self._lookahead)]:
                    for rows in self.row_buckets:
                        for cache_length in self.length_buckets:
                            self._decode_chunk(
                                rows, cache_length, wide=wide, speculative=speculative
                            )

    # Reading a request.

    def _prepare(self, prompt, generation_config, options, processors):
        lm = self.lm
        call = options_lib.call_options(generation_config, options)
        chosen = self._chosen(processors)
        config, sampler, chain = options_lib.resolve(
            self.generation_config, call, None, chosen or None
        )
        for name, (asked, advice) in UNSUPPORTED.items():
            value = getattr(config, name)
            if value is not None and asked(value):
                raise ValueError(f"The engine does not run `{name}`: {advice}.")
        self._check_speculation(config)
        if config.top_logprobs and config.top_logprobs > self.top_logprobs:
            raise ValueError(
                f"`top_logprobs` must be <= {self.top_logprobs} (the engine's "
                f"`top_logprobs`). Received: {config.top_logprobs}"
            )
        ids = _prompt_ids(prompt, lm.tokenizer)
        rows = config.num_return_sequences or 1
        if rows > self.num_slots:
            raise ValueError(
                f"`num_return_sequences`={rows} needs more slots than the "
                f"engine's {self.num_slots}."
            )
        seed = config.seed if config.seed is not None else secrets.randbits(31)
        structured = [p for p in chain if isinstance(p, StructuredOutput)]
        reader = GenerationRequest(
            lm,
            [ids] * rows,
            config.replace(num_return_sequences=None),
            sampler,
            [p for p in chain if not isinstance(p, StructuredOutput)],
            seed,
        )
        if max(reader.ends) > self.max_length:
            raise ValueError(
                f"The prompt ({len(ids)} tokens) plus the new tokens reach "
                f"{max(reader.ends)}, beyond the engine's `max_length` of "
                f"{self.max_length}."
            )
        lanes = self._lanes.match(reader.processors)
        settings = _settings(sampler, reader)
        automaton = _automaton(structured, reader, lm)
        if automaton is not None:  # it fits alone, or it is refused now
            ConstraintTables.sizes(
                [automaton],
                lm.backbone.vocabulary_size,
                capacity=self.constraint_capacity,
            )
        settings["ngram"] = config.prompt_lookup_ngram or 0
        speculates = self._draft is not None or settings["ngram"]
        settings["speculative_tokens"] = (
            min(
                config.num_speculative_tokens or SPECULATIVE_TOKENS,
                self.num_speculative_tokens,
            )
            if speculates
            else 0
        )
        return _Job(
            reader,
            GenerationHandle(rows),
            settings,
            lanes,
            config.max_time,
            automaton,
            cache_prompt=config.cache_prompt is not False,
        )

    def _check_speculation(self, config):
        """Refuse speculation this engine cannot run for `config`."""
        count, ngram = config.num_speculative_tokens, config.prompt_lookup_ngram
        if self._draft is not None and ngram is not None:
            raise ValueError(
                "This engine drafts with its `draft_model`: `prompt_lookup_ngram` "
                "is for an engine made without one."
            )
        if count is not None and ngram is None and self._draft is None:
            raise ValueError(
                "`num_speculative_tokens` needs `prompt_lookup_ngram` (the "
                "engine drafts by prompt lookup)."
            )
        if ngram is not None and not self.num_speculative_tokens:
            raise ValueError(
                "This engine does not speculate: make it with "
                "`Engine(..., num_speculative_tokens=4)` (`keras-gen serve "
                "--num-speculative-tokens 4`) to run `prompt_lookup_ngram`."
            )
        if count is not None and count > self.num_speculative_tokens:
            raise ValueError(
                f"`num_speculative_tokens` must be <= {self.num_speculative_tokens}"
                f" (the engine's). Received: num_speculative_tokens={count}"
            )

    def _chosen(self, processors):
        """A request's registered processors, as instances."""
        if processors is None:
            return []
        if isinstance(processors, dict):
            unknown = sorted(set(processors) - set(self.processors))
            if unknown:
                raise ValueError(
                    f"Unknown processors {unknown}: this engine runs "
                    f"{sorted(self.processors)} (`Engine(lm, processors=...)`)."
                )
            chosen = []
            for name, template in self.processors.items():  # the lanes' order
                if name in processors:
                    arguments = processors[name]
                    if not isinstance(arguments, dict):
                        raise TypeError(
                            f"The arguments of processor {name!r} must be a dict "
                            f"of keyword arguments. Received: {arguments!r}"
                        )
                    config = {**template.get_config(), **arguments}
                    chosen.append(type(template).from_config(config))
            return chosen
        chosen = processors_lib.get_list(processors)
        for processor in chosen:
            if processor.state_key is not None:
                raise ValueError(
                    "A structured output is a request option: give it as "
                    "`response_format`."
                )
        return list(chosen)

    # The step thread.

    def _run(self):
        distribution = self._distribution
        with contextlib.nullcontext() if distribution is None else distribution.scope():
            self._serve()

    def _serve(self):
        while True:
            with self._condition:
                while not (
                    self._closed or self._waiting or self._jobs or self._warm_up
                ):
                    self._condition.wait()
                if self._closed:
                    break
                warm_up, self._warm_up = self._warm_up, None
            if warm_up is not None:
                *settings, done = warm_up
                try:
                    self._compile_all(*settings)
                    done.set_result(None)
                except Exception as error:
                    done.set_exception(error)
            try:
                # A chunk after a prefill ends is one step long, so that the
                # new requests' first tokens go out without waiting for a
                # whole chunk of the others.
                self._admit()
                started = self._prefill()
                if self._running():
                    began = time.perf_counter()
                    program_seconds = self._decode_chunk(steps=1 if started else None)
                    self._deliver()
                    host = time.perf_counter() - began - program_seconds
                    self._host_seconds = 0.8 * self._host_seconds + 0.2 * host
            except Exception as error:  # every running request learns of it
                self._fail_all(error)
        self._fail_all(EngineClosed("The engine was closed."), waiting=True)

    def _fail_all(self, error, waiting=False):
        with self._condition:
            jobs = list(self._jobs)
            if waiting:
                jobs += list(self._waiting)
                self._waiting.clear()
        for job in jobs:
            self._release(job, error=error)
        self._device = None  # rebuilt at the next admission

    def _running(self):
        """The admitted requests whose prompts are prefilled."""
        return [job for job in self._jobs if not job.prefilling]

    def _admit(self):
        """Move waiting requests into free slots, oldest first (their
        prompts are prefilled next)."""
        while True:
            with self._condition:
                while self._waiting and self._waiting[0].handle.cancelled:
                    self._waiting.popleft().handle.finish()
                if not self._waiting or len(self._free) < self._waiting[0].rows:
                    self.metrics.waiting.set(len(self._waiting))
                    return
                job = self._waiting.popleft()
                job.slots = [self._free.pop(0) for _ in range(job.rows)]
                job.admitted = time.perf_counter()
                self._jobs.append(job)
                self.metrics.waiting.set(len(self._waiting))
            self.metrics.running.set(len(self._jobs))
            try:
                self._load_automaton(job)
            except ValueError as error:  # with the running ones, too many
                self._release(job, error=error)
                continue
            for row, slot in enumerate(job.slots):
                self._seed_slot(job, row, slot)
            self.metrics.prompt_tokens.inc(sum(map(len, job.reader.row_prompts)))

    def _seed_slot(self, job, row, slot):
        """Set `slot`'s inputs for row `row` of `job`. Until its prompt is
        prefilled the slot stands still in decode steps (done, at position
        1: a step rewrites the first position's keys and values from the
        prompt's first token, as a prefill does)."""
        host, settings = self._host, job.settings
        prompt = job.reader.row_prompts[row]
        length = len(prompt)
        host["token_ids"][slot] = 0
        host["token_ids"][slot, :length] = prompt
        host["prompt_lengths"][slot] = length
        host["index"][slot] = 1
        host["end"][slot] = job.reader.row_ends[row]
        host["done"][slot] = True
        host["stop_token_ids"][slot] = settings["stop_token_ids"]
        host["seed"][slot] = (settings["seed"], row * ROW_STRIDE)
        host["top_rows"][slot] = settings["top_logprobs"] > 0
        host["constraint_state"][slot] = self._tables.start_state(job.automaton)
        host["limits"][slot] = settings["speculative_tokens"]
        host["ngrams"][slot] = settings["ngram"]
        for name, value in settings["sampler"].items():
            self._numbers[name][slot] = value
        self._lanes.assign(slot, job.lanes)

    def _prefill(self):
        """Prefill the admitted prompts, oldest first, in chunks of at most
        `prefill_chunk_tokens` positions; whether a request's prompt was
        completed (it then runs). While requests decode, the chunks between
        two decode chunks take about `prefill_pause` decode chunks' time
        (by their measured times; at least one chunk; longer for a burst,
        see `_PrefillBudget`); otherwise every admitted prompt is
        prefilled."""
        running, budget = self._running(), _PrefillBudget(np.inf)
        if running and self.prefill_pause < np.inf:
            step = self._step_seconds.get(False, self._step_seconds.get(True, 0.0))
            budget = _PrefillBudget(
                self.prefill_pause * step * self._chunk_steps(False),
                running=sum(job.rows for job in running),
                waiting=sum(1 for _ in self._unfilled_rows()),
            )
        started, first = False, not self._admit_short(budget)
        for job in [job for job in self._jobs if job.prefilling]:
            if job.handle.cancelled:
                self._release(job)
                continue
            for row, slot in enumerate(job.slots):
                prompt = job.reader.row_prompts[row]
                if job.filled[row] is None:
                    job.filled[row] = self._reuse(job, slot, prompt)
                group = self._block_group * self.prefix_cache.block_tokens
                while job.filled[row] < len(prompt):
                    start = job.filled[row]
                    count = self._chunk_tokens(
                        start, len(prompt) - start, budget.left()
                    )
                    if not count and not first:
                        break
                    count = count or min(len(prompt) - start, self.prompt_buckets[0])
                    seconds = self._prefill_chunk(slot, start, count)
                    budget.spend(seconds, rows=int(start + count == len(prompt)))
                    job.filled[row], first = start + count, False
                    # Each group of blocks is kept as soon as it is whole:
                    # a long prompt's copies spread over its chunks.
                    if (
                        start + count == len(prompt)
                        or (start + count) // group > start // group
                    ):
                        self._remember(job, slot, prompt[: start + count])
            if any(
                filled < len(p) for filled, p in zip(job.filled, job.reader.row_prompts)
            ):
                return started  # the time is spent
            for slot in job.slots:
                self._host["index"][slot] = self._host["prompt_lengths"][slot]
                self._host["done"][slot] = False
            job.prefilling, started = False, True
        return started

    def _admit_short(self, budget):
        """Prefill the short prompts that wait first in line, `ADMIT_ROWS`
        to a call, while two or more wait and a call fits in the
        `_PrefillBudget` (the first always runs); whether a call ran."""
        rows, ran = [], False
        for job, row, slot, prompt in self._unfilled_rows():
            if job.filled[row] or len(prompt) > self._short_buckets[-1]:
                break
            rows.append((job, row, slot))
        while len(rows) > 1:
            group, rows = rows[:ADMIT_ROWS], rows[ADMIT_ROWS:]
            prompts = [job.reader.row_prompts[row] for job, row, _ in group]
            longest = max(map(len, prompts))
            bucket = next(b for b in self._short_buckets if b >= longest)
            key = ("admit", (ADMIT_ROWS, bucket))
            if ran and (self._prefill_seconds.get(key) or 0.0) > budget.left():
                break
            slots = [slot for *_, slot in group]
            seconds = self._admit_rows(key, slots, list(map(len, prompts)))
            budget.spend(seconds, rows=len(group))
            ran = True
            for (job, row, slot), prompt in zip(group, prompts):
                job.filled[row] = len(prompt)
                self._remember(job, slot, prompt)
        return ran

    def _unfilled_rows(self):
        """`(job, row, slot, prompt)` of each prompt still to prefill, oldest
        first, after copying in its cached prefix (up to the first cancelled
        request, which `_prefill` releases)."""
        for job in self._jobs:
            if not job.prefilling:
                continue
            if job.handle.cancelled:
                return
            for row, slot in enumerate(job.slots):
                prompt = job.reader.row_prompts[row]
                if job.filled[row] is None:
                    job.filled[row] = self._reuse(job, slot, prompt)
                if job.filled[row] < len(prompt):
                    yield job, row, slot, prompt

    @property
    def _short_buckets(self):
        """The prompt buckets that `_admit_short` prefills rows of."""
        return [b for b in self.prompt_buckets if b <= SHORT_PROMPT_TOKENS]

    def _chunk_tokens(self, start, remaining, seconds):
        """The most of `remaining` prompt positions from `start` that one
        prefill chunk runs in about `seconds` (by the chunk programs'
        measured times; one not yet measured is taken to fit), or 0."""
        for bucket in reversed(self.prompt_buckets):
            count = min(remaining, bucket)
            key, _ = self._prefill_key(start, count)
            if (self._prefill_seconds.get(key) or 0.0) <= seconds:
                return count
        return 0

    def _prefill_key(self, start, count):
        """The program that prefills `count` positions from `start`, and
        the position its chunk starts at: `("admit", (1, bucket))` for a
        chunk from the prompt's start, `("extend", (bucket, attended))`
        after. A chunk is padded to a bucket, started earlier where the
        padding would pass the cache's end (the positions before `start`
        are written again with the same values)."""
        bucket = next(b for b in self.prompt_buckets if b >= count)
        start = min(start, self.cache_length - bucket)
        if start == 0:  # its positions attend to one another only
            return ("admit", (1, bucket)), 0
        attended = next(n for n in self.length_buckets if n >= start + bucket)
        return ("extend", (bucket, attended)), start

    def _prefill_chunk(self, slot, start, count):
        """Seed positions `start` to `start + count` of `slot`'s cache rows
        from its prompt; the seconds it took."""
        end = start + count
        key, start = self._prefill_key(start, count)
        kind, shape = key
        if kind == "admit":
            return self._admit_rows(key, [slot], [end])
        token_ids = self._host["token_ids"][slot, start : start + shape[0]]
        return self._run_prefill(
            key,
            ops.convert_to_tensor(slot, "int32"),
            ops.convert_to_tensor(token_ids[None], "int32"),
            ops.convert_to_tensor(start, "int32"),
        )

    def _admit_rows(self, key, slots, ends):
        """Seed the cache rows of `slots` from their prompts' first `ends`
        positions with the admit program `key` (rows past the prompts
        repeat the last one); the seconds it took."""
        rows, bucket = key[1]
        slots = slots + slots[-1:] * (rows - len(slots))
        ends = ends + ends[-1:] * (rows - len(ends))
        return self._run_prefill(
            key,
            ops.convert_to_tensor(np.array(slots), "int32"),
            ops.convert_to_tensor(self._host["token_ids"][slots, :bucket], "int32"),
            ops.convert_to_tensor(np.arange(bucket) < np.array(ends)[:, None]),
        )

    def _run_prefill(self, key, *arguments):
        """Run the prefill program `key` on the cache; the seconds it took
        (the program's measured time, kept per program)."""
        began = time.perf_counter()
        if self._device is None:
            self._device = self._empty_cache()
        state = self._program(*key)({"state": self._device}, *arguments)["state"]
        self._device = state
        backend.wait(state)
        seconds = time.perf_counter() - began
        if key not in self._prefill_seconds:  # a first call's time is its compile's
            self._prefill_seconds[key] = None
        else:
            previous = self._prefill_seconds[key] or seconds
            self._prefill_seconds[key] = 0.8 * previous + 0.2 * seconds
        return seconds

    def _reuse(self, job, slot, prompt):
        """Copy the longest run of cached blocks that begins `prompt` into
        `slot`'s cache rows; the positions copied."""
        if not job.cache_prompt or not self.prefix_cache.capacity:
            return 0
        blocks = self.prefix_cache.lookup(prompt)
        self.metrics.prefix_cache_queries.inc(len(prompt))
        self.metrics.prefix_cache_hits.inc(len(blocks) * self.prefix_cache.block_tokens)
        group = self._block_group
        for first in range(0, len(blocks), group):
            first = self._group_start(first)
            self._write_blocks(slot, first, blocks[first : first + group])
        return len(blocks) * self.prefix_cache.block_tokens

    @property
    def _block_group(self):
        """The blocks one read or write program copies."""
        return min(BLOCK_GROUP, self.cache_length // self.prefix_cache.block_tokens)

    def _group_start(self, first):
        """The first block of a group that begins at block `first`, moved
        back where the group would pass the cache's end."""
        blocks = self.cache_length // self.prefix_cache.block_tokens
        return min(first, blocks - self._block_group)

    def _write_blocks(self, slot, first, blocks):
        """Write `blocks` into `slot`'s cache rows from block `first`; the
        rest of the group with zeros (positions the prompt's prefill
        writes next)."""
        size, group = self.prefix_cache.block_tokens, self._block_group
        layers = []
        for layer in zip(*blocks):
            pair = []
            for part in zip(*layer):  # keys, then values
                heads, _, head_dim = part[0].shape
                padding = np.zeros((heads, (group - len(part)) * size, head_dim))
                pair.append(
                    ops.convert_to_tensor(
                        np.concatenate([*part, padding.astype(part[0].dtype)], axis=1)
                    )
                )
            layers.append(tuple(pair))
        if self._device is None:
            self._device = self._empty_cache()
        self._device = self._program("write")(
            {"state": self._device},
            ops.convert_to_tensor(slot, "int32"),
            ops.convert_to_tensor(first * size, "int32"),
            tuple(layers),
        )["state"]

    def _read_blocks(self, slot, first):
        """The group of blocks from block `first` of `slot`'s cache rows,
        as host arrays."""
        size, group = self.prefix_cache.block_tokens, self._block_group
        read = self._program("read")(
            {"state": self._device},
            ops.convert_to_tensor(slot, "int32"),
            ops.convert_to_tensor(first * size, "int32"),
        )
        read = [tuple(map(ops.convert_to_numpy, layer)) for layer in read]
        return [
            tuple(
                tuple(x[:, i * size : (i + 1) * size].copy() for x in layer)
                for layer in read
            )
            for i in range(group)
        ]

    def _remember(self, job, slot, token_ids):
        """Keep the blocks of `token_ids` that `slot`'s cache rows hold and
        the prefix cache lacks."""
        cache = self.prefix_cache
        if not job.cache_prompt or not cache.capacity:
            return
        keys = cache.keys(token_ids)
        missing = [i for i, key in enumerate(keys) if key not in cache]
        while missing:
            first = self._group_start(missing[0])
            blocks = self._read_blocks(slot, first)
            for index in range(first, min(first + self._block_group, len(keys))):
                cache.put(token_ids, index, blocks[index - first], keys=keys)
            missing = [i for i in missing if i >= first + self._block_group]
        cache.touch(keys)
        self.metrics.prefix_cache_bytes.set(cache.bytes)

    def _load_automaton(self, job):
        """Make room for `job`'s automaton in the tables: when they lack
        it, pack the running requests' automata anew and renumber the
        running slots' states."""
        automaton = job.automaton
        if automaton is None or automaton.key in self._tables.keys:
            return
        needed = {}
        for running in self._jobs:
            if running.automaton is not None:
                needed.setdefault(running.automaton.key, running.automaton)
        tables = ConstraintTables(
            needed.values(),
            self._tables.vocabulary_size,
            capacity=self.constraint_capacity,
        )
        states = self._host["constraint_state"]
        held = {slot for running in self._jobs for slot in running.slots}
        for slot in set(range(self.num_slots)) - held:
            states[slot] = FREE  # no stale state numbers past the new tables
        for running in self._jobs:
            if running is job or running.automaton is None:
                continue
            for slot in running.slots:
                owner, local = self._tables.local_state(int(states[slot]))
                if owner is not None:  # not DEAD (or FREE)
                    states[slot] = tables.start_state(owner) + local
        self._tables, self._table_tensors = tables, None

    def _chunk_steps(self, speculative):
        """Steps of the next decode chunk: `chunk_size`, or as many as take
        about `CHUNK_SECONDS`, or more (up to `MAX_CHUNK_SECONDS`) where the
        host's work between chunks would take more than `HOST_SHARE` of the
        chunk's time; a speculative chunk's tokens fit the rings."""
        steps = self.chunk_size
        if steps is None:
            seconds = self._step_seconds.get(speculative)
            if seconds is None:
                steps = 1
            else:
                steps = max(
                    int(CHUNK_SECONDS / seconds),
                    min(
                        math.ceil(self._host_seconds / (HOST_SHARE * seconds)),
                        int(MAX_CHUNK_SECONDS / seconds),
                    ),
                )
            steps = int(np.clip(steps, 1, MAX_CHUNK_STEPS))
        if speculative:
            steps = max(1, min(steps, self._ring // self._lookahead))
        return steps

    def _decode_chunk(
        self, rows=None, cache_length=None, steps=None, wide=False, speculative=False
    ):
        """Run the decode program over the first `rows` slots and
        `cache_length` positions: by default the smallest row and length
        buckets that hold every running request, writing the wide outputs
        if one of them asks, speculative if one of them speculates. By
        default `_chunk_steps` steps. Returns the seconds the program
        took."""
        timed = rows is None
        if rows is None:
            running = self._running()
            occupied = [slot for job in running for slot in job.slots]
            rows = next(r for r in self.row_buckets if r > max(occupied))
            end = max(self._host["end"][occupied])
            cache_length = next(n for n in self.length_buckets if n >= end)
            wide = any(job.settings["wide"] for job in running)
            speculative = any(map(self._proposes, occupied))
        if steps is None:
            steps = self._chunk_steps(speculative)
        if self._table_tensors is None:
            self._table_tensors = {
                name: ops.convert_to_tensor(array)
                for name, array in self._tables.arrays.items()
            }
        outputs = self._outputs(wide)
        parameters, lane_rows = self._lanes.inputs(rows)

        def tensors(arrays):
            return {
                name: ops.convert_to_tensor(array[:rows])
                for name, array in arrays.items()
            }

        slots = {
            **tensors(self._host),
            "state": self._device,
            "steps": ops.convert_to_tensor(steps, "int32"),
            "outputs": tensors(outputs),
            "parameters": tensors(self._numbers),
            "processor_parameters": list(map(tensors, parameters)),
            "processor_rows": [
                ops.convert_to_tensor(flags)
                for flags in (*lane_rows, self._host["constraint_state"][:rows] != FREE)
            ],
        }
        key = (
            rows,
            cache_length,
            tuple(array.shape for array in self._tables.arrays.values()),
            self._lanes.structure,
            wide,
            speculative,
        )
        started = time.perf_counter()
        with backend.no_grad():
            slots = self._program("decode", key)(slots, self._table_tensors)
        backend.wait(slots)
        seconds = time.perf_counter() - started
        self._device = slots["state"]
        for name in _READ:
            self._host[name][:rows] = ops.convert_to_numpy(slots[name])
        for name, array in outputs.items():
            array[:rows] = ops.convert_to_numpy(slots["outputs"][name])
        if speculative:
            for name in ("draft_tokens", "accepted_tokens"):
                count = ops.convert_to_numpy(slots[name]).sum()
                getattr(self.metrics, name).inc(int(count))
                self._host[name][:] = 0
        if timed:
            step = seconds / steps
            previous = self._step_seconds.get(speculative, step)
            self._step_seconds[speculative] = 0.8 * previous + 0.2 * step
        return seconds

    def _proposes(self, slot):
        """Whether `slot` drafts in the next chunk (which picks its
        program): while it runs and speculates, with the draft model every
        step; by prompt lookup when it has drafts now (the host's
        `lookup_proposes`)."""
        host = self._host
        ngram, length = int(host["ngrams"][slot]), int(host["index"][slot])
        running = not host["done"][slot] and length < host["end"][slot]
        if not (running and host["limits"][slot]):
            return False
        if self._draft is not None:  # each of its steps drafts
            return True
        if length <= ngram:
            return False
        tokens = host["token_ids"][slot, :length]
        earlier = np.lib.stride_tricks.sliding_window_view(tokens[:-1], ngram)
        return bool((earlier == tokens[-ngram:]).all(axis=1).any())

    def _outputs(self, wide):
        """The per-step output rings a decode program writes."""
        names = ("log_probs", "top_log_probs", "top_token_ids")
        return {
            name: self._rings[name] for name in names + (WIDE_OUTPUTS if wide else ())
        }

    @functools.cached_property
    def _rings(self):
        """`(slots, ring, ...)` arrays: each slot's per-step outputs of the
        latest chunk, position `i` at `i % ring` (allocated when used)."""
        backbone = self.lm.backbone
        shapes = {
            "log_probs": (),
            "top_log_probs": (self.top_logprobs,),
            "top_token_ids": (self.top_logprobs,),
            "scores": (backbone.vocabulary_size,),
            "logits": (backbone.vocabulary_size,),
            "hidden_states": (backbone.hidden_dim,),
        }
        return _LazyArrays(
            {
                name: (
                    (self.num_slots, self._ring, *shape),
                    _OUTPUT_DTYPES.get(name, "float32"),
                )
                for name, shape in shapes.items()
            }
        )

    def _deliver(self):
        host, now = self._host, time.perf_counter()
        for job in self._running():
            reader, slots = job.reader, job.slots
            outputs = {"token_ids": host["token_ids"][slots]}
            for name in reader.outputs:
                outputs[name] = _Ring(self._rings[name][slots])
            limits = [int(host["index"][slot]) for slot in slots]
            time_is_up = (
                job.max_time is not None and now - job.submitted >= job.max_time
            )
            chunk = reader.read(outputs, limits, time_is_up)
            self._observe(job, chunk, now)
            if any(chunk.token_ids) or reader.done:
                job.handle.put(chunk)
            for row, slot in enumerate(slots):
                if reader.finish_reasons[row] is not None:
                    host["done"][slot] = True
            if reader.done and not job.handle.cancelled:
                # What the rows computed serves a request that continues
                # them (the next turn of a chat).
                for slot in slots:
                    self._remember(
                        job, slot, host["token_ids"][slot, : host["index"][slot] - 1]
                    )
            if reader.done or job.handle.cancelled:
                self._release(job)

    def _observe(self, job, chunk, now):
        """Count a chunk's tokens; time the first token and the gaps."""
        self.metrics.generated_tokens.inc(sum(len(ids) for ids in chunk.token_ids))
        for row, ids in enumerate(chunk.token_ids):
            if not ids:
                continue
            # The chunk's tokens arrive together: they share the time since
            # the row's previous delivery (or, for the first, its admission).
            last = job.last_delivery[row]
            gap = (now - (job.admitted if last is None else last)) / len(ids)
            if last is None:
                self.metrics.time_to_first_token.observe(now - job.submitted)
            for _ in ids[last is None :]:
                self.metrics.inter_token_latency.observe(gap)
            job.last_delivery[row] = now

    def _release(self, job, error=None):
        """End a request: free its slots and close its handle."""
        with self._condition:
            if job in self._jobs:
                self._jobs.remove(job)
            for slot in job.slots:
                self._host["done"][slot] = True
                self._lanes.release(slot)
                if slot not in self._free:
                    self._free.append(slot)
            self._free.sort()
            self._condition.notify_all()
        if error is None and job.handle.cancelled:
            reasons = ["cancelled"] * job.rows
        else:
            reasons = [r or "error" for r in job.reader.finish_reasons]
        if error is None:
            for reason in reasons:
                self.metrics.requests.labels(finish_reason=reason).inc()
        self.metrics.running.set(len(self._jobs))
        job.handle.finish(error)

    # Programs and state.

    def _program(self, kind, bucket=None):
        """The compiled `admit` (per prompt bucket), `extend` (per prompt
        and length bucket), `read`, `write` or `decode` (per row and length
        bucket) program."""
        return self.programs.get((kind, bucket), lambda: self._build(kind, bucket))

    def _build(self, kind, bucket):
        lm = self.lm
        donate = (0,)
        if kind == "admit":
            function = functools.partial(engine_programs.admit, self._backbones)
        elif kind == "extend":  # bucket: (chunk bucket, positions attended)
            function = functools.partial(
                engine_programs.extend, self._backbones, cache_length=bucket[1]
            )
        elif kind == "read":
            function = functools.partial(
                engine_programs.read_block,
                length=self._block_group * self.prefix_cache.block_tokens,
            )
            donate = ()
        elif kind == "write":
            function = engine_programs.write_block
        else:  # bucket: (rows, cache length, ..., speculative)
            structured = StructuredOutput.for_tables(self._tables)
            speculative = bucket[-1]
            function = functools.partial(
                engine_programs.decode,
                lm,
                self._speculative_sampler if speculative else self._sampler,
                (*self._lanes.templates, structured),
                # A speculative step attends to the positions it verifies.
                cache_length=bucket[1] + (self._lookahead if speculative else 0),
                lookup_ngram=(
                    MAX_NGRAM_SIZE if self._lookahead and not self._draft else None
                ),
            )
        program = backend.compile_function(
            function,
            [*lm.variables, *(self._draft.variables if self._draft else ())],
            jit_compile=lm.generate_jit_compile,
            donate_argnums=donate,
        )
        return self._counting(program)

    def _counting(self, program):
        # The step thread's compiles: not those of a step compiling in the
        # background, which make no request wait.
        def call(*args):
            before = backend.trace_count(this_thread=True)
            result = program(*args)
            compiled = backend.trace_count(this_thread=True) - before
            self.compilations += compiled
            self.metrics.compilations.inc(compiled)
            return result

        return call

    @property
    def _backbones(self):
        """The models whose layers the cache holds: the target, then the
        draft model."""
        return (self.lm.backbone,) + ((self._draft,) if self._draft else ())

    def _empty_cache(self):
        layers = []
        for backbone in self._backbones:
            shape, dtype = self._cache_shape(backbone)
            for _ in range(backbone.num_layers):
                layers.append((ops.zeros(shape, dtype), ops.zeros(shape, dtype)))
        return tuple(layers)

    def _cache_shape(self, backbone):
        """One layer's keys (or values) of `backbone`: `(slots, heads,
        length, head_dim)`, the length past `cache_length` by the
        speculative lookahead; and their dtype."""
        heads, size = backbone.num_key_value_heads, backbone.head_dim
        length = self.cache_length + self._lookahead
        return (self.num_slots, heads, length, size), backbone.compute_dtype

    @property
    def _cache_bytes(self):
        """The bytes of the key/value cache."""
        total = 0
        for backbone in self._backbones:
            shape, dtype = self._cache_shape(backbone)
            itemsize = np.dtype(dtype).itemsize
            total += 2 * backbone.num_layers * int(np.prod(shape)) * itemsize
        return total

    def _empty_numbers(self):
        """Each slot's sampler numbers; free slots draw nothing."""
        numbers = {
            name: np.full((self.num_slots, 1), value, parameter_dtype(value))
            for name, value in self._sampler.get_parameters().items()
        }
        numbers["temperature"][:] = 0.0
        return numbers

    def _empty_host_arrays(self):
        """Each slot's inputs of the decode loop; free slots are done."""
        slots, length = self.num_slots, self.cache_length + self._lookahead
        return {
            "token_ids": np.zeros((slots, length), "int32"),
            "prompt_lengths": np.ones((slots,), "int32"),
            "index": np.ones((slots,), "int32"),
            "end": np.ones((slots,), "int32"),
            "done": np.ones((slots,), bool),
            "stop_token_ids": np.full((slots, STOP_TOKEN_SLOTS), -1, "int32"),
            "seed": np.zeros((slots, 2), "int32"),
            "top_rows": np.zeros((slots,), bool),
            "constraint_state": np.full((slots,), FREE, "int32"),
            # Speculation: the most drafts each slot keeps per step, and
            # its prompt-lookup n-gram size (0: it does not speculate).
            "limits": np.zeros((slots,), "int32"),
            "ngrams": np.zeros((slots,), "int32"),
            # ... and what its latest chunk proposed and kept.
            "draft_tokens": np.zeros((slots,), "int32"),
            "accepted_tokens": np.zeros((slots,), "int32"),
        }


# What the host keeps of a decode loop.
_READ = ("token_ids", "index", "done", "constraint_state")
_OUTPUT_DTYPES = {"top_token_ids": "int32"}


class _LazyArrays(dict):
    """Zero arrays by name, each allocated on first use: `{name: (shape,
    dtype)}`."""

    def __init__(self, specs):
        super().__init__()
        self.specs = specs

    def __missing__(self, name):
        shape, dtype = self.specs[name]
        self[name] = np.zeros(shape, dtype)
        return self[name]


class _Ring:
    """A slot's output ring read by position: `ring[:, a:b]` is positions
    `a` to `b` (at `a % width` ...), as a reader reads a buffer."""

    def __init__(self, array):
        self.array = array

    def __getitem__(self, key):
        rows, positions = key
        width = self.array.shape[1]
        return self.array[rows][:, np.arange(positions.start, positions.stop) % width]


def _buckets(minimum, limit):
    """Powers of two from `minimum` below `limit`, then `limit`."""
    buckets = []
    while minimum < limit:
        buckets.append(minimum)
        minimum *= 2
    return buckets + [limit]


def _prompt_ids(prompt, tokenizer):
    prompts, form, _ = prompts_lib.read_prompts(prompt, tokenizer)
    if len(prompts) != 1:
        raise ValueError(
            "`Engine.submit` takes one prompt (a string or a list of token "
            "ids); use `Engine.generate` for several."
        )
    return prompts[0]


def _registered(processors):
    """The engine's registered processors: a dict from name to instance."""
    registered = {}
    for name, processor in (processors or {}).items():
        if isinstance(processor, type) and issubclass(
            processor, processors_lib.LogitsProcessor
        ):
            processor = processor()
        if not isinstance(name, str) or not isinstance(
            processor, processors_lib.LogitsProcessor
        ):
            raise TypeError(
                "`processors` maps names to `LogitsProcessor` classes or "
                f"instances. Received: {name!r}: {processor!r}"
            )
        if processor.state_key is not None:
            raise ValueError(
                f"Processor {name!r} keeps a per-row state: the engine runs "
                "structured outputs through `response_format` only."
            )
        registered[name] = processor
    return registered


def _automaton(structured, reader, lm):
    """The automaton of a request's structured output, or `None`."""
    if not structured:
        return None
    (constraint,) = structured
    if constraint.constraints is not None:
        if len(constraint.constraints) != 1:
            raise ValueError(
                "`Engine.submit` takes one prompt: give one `response_format`, "
                f"not a list of {len(constraint.constraints)}."
            )
        constraint = constraint.constraints[0]
        if constraint is None:
            return None
    if not reader.stop_token_ids:
        raise ValueError(
            "Structured output ends a row with a stop token once the text is "
            "complete: this request has none. Give `stop_token_ids`."
        )
    return constraint.automaton(lm.tokenizer, lm.backbone.vocabulary_size)


def _settings(sampler, reader):
    """One request's per-slot settings: the sampler's numbers (temperature
    0 for greedy decoding), stop ids, seed and the outputs it reads."""
    if isinstance(sampler, samplers.GreedySampler):
        numbers = {"temperature": 0.0}
    elif type(sampler) is samplers.RandomSampler:
        numbers = sampler.get_parameters()
    else:
        raise ValueError(
            f"The engine samples greedily or at random; {type(sampler).__name__} "
            "runs with `CausalLM.generate`."
        )
    stop_ids = list(reader.stop_token_ids)
    return {
        "sampler": {
            **{name: options_lib.NEUTRAL[name] for name in options_lib.FILTERS},
            **numbers,
        },
        "stop_token_ids": stop_ids + [-1] * (STOP_TOKEN_SLOTS - len(stop_ids)),
        "top_logprobs": reader.top_logprobs or 0,
        "wide": bool(set(reader.outputs) & set(WIDE_OUTPUTS)),
        "seed": reader.seed[0],
    }
