"""The causal language model task: compile once, generate many times."""

import functools
import os
import time
import warnings

import keras
from keras import ops

from keras_gen import backend
from keras_gen import processors as processors_lib
from keras_gen import samplers
from keras_gen.models.generation_request import GenerationRequest
from keras_gen.samplers.sampler import check_count
from keras_gen.samplers.sampler import check_positive
from keras_gen.samplers.speculative_decoding import SpeculativeSampler
from keras_gen.streaming.generation_output import GenerationOutput


def _requested_outputs(scores, logits, log_probs, hidden_states):
    wanted = {
        "scores": scores,
        "logits": logits,
        "log_probs": log_probs,
        "hidden_states": hidden_states,
    }
    return tuple(name for name, flag in wanted.items() if flag)


# Per-row counts a speculative loop keeps: `lengths` tells the host how far
# each row got; the others are its acceptance counts.
ROW_COUNTS = ("lengths", "accepted_tokens", "draft_tokens")


def program_outputs(loop, finished):
    """What the host reads from a loop state: the sampler's finished tokens
    (a tensor, or a dict of them and beam search's `sequence_scores`), the
    per-step outputs and (speculative decoding) per-row counts."""
    if not isinstance(finished, dict):
        finished = {"token_ids": finished}
    counts = {name: loop[name] for name in ROW_COUNTS if name in loop}
    return {**finished, **loop["outputs"], **counts}


@keras.saving.register_keras_serializable(package="keras_gen")
class CausalLM(keras.Model):
    """A language model that predicts the next token, with `generate`.

    `CausalLM` wraps a `Backbone` and owns generation for every
    architecture: cache seeding and the sampler loop run as one compiled
    program (XLA on JAX and TensorFlow; on torch a host loop around one
    `torch.compile`d step). The program is built once per shape bucket and
    reused: prompts of any length and any `max_length` within a bucket, and
    new sampler settings, run without recompiling.

    Args:
        backbone: a `keras_gen.models.Backbone`.
        tokenizer: optional tokenizer with `encode(text) -> ids` and
            `decode(ids) -> text`; with one, `generate` takes and returns
            strings.

    Examples:
    >>> from keras_gen.models import GPT2Backbone, GPT2CausalLM
    >>> backbone = GPT2Backbone(
    ...     vocabulary_size=50, num_layers=2, num_heads=2, hidden_dim=16,
    ...     intermediate_dim=32, max_sequence_length=64)
    >>> lm = GPT2CausalLM(backbone)
    >>> lm.compile(sampler="top_k")
    >>> len(lm.generate([1, 2, 3], max_length=10, seed=0))
    10
    """

    def __init__(self, backbone, tokenizer=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.sampler = None
        self.generate_function = None
        # Steps per compiled chunk of a stream.
        self.stream_chunk_size = 4
        self.compile()
        # The backbone is built; the task adds no weights of its own.
        self.built = True

    def call(self, inputs, training=False):
        """Logits `(batch, length, vocab)` for token ids or a dict of them."""
        if isinstance(inputs, dict):
            inputs = inputs["token_ids"]
        hidden_states = self.backbone(inputs, training=training)
        return self.backbone.compute_logits(hidden_states)

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        sampler="greedy",
        processors=None,
        jit_compile=True,
        draft_model=None,
        num_speculative_tokens=None,
        prompt_lookup_ngram=None,
        **kwargs,
    ):
        """Configure training and generation.

        Args:
            optimizer: as in `keras.Model.compile`; `"auto"` is Adam.
            loss: as in `keras.Model.compile`; `"auto"` is sparse
                categorical cross-entropy on logits.
            sampler: a sampler name (`"greedy"`, `"random"`, `"top_k"`,
                `"top_p"`, `"min_p"`, `"beam"`, `"contrastive"`) or a
                `keras_gen.samplers.Sampler`.
            processors: `keras_gen.processors.LogitsProcessor`s (or their
                names or configs) applied in order to every step's logits
                before the sampler's temperature; `generate(processors=...)`
                overrides them for one call.
            jit_compile: bool. `False` runs generation eagerly (debugging).
            draft_model: a smaller `CausalLM` with the same vocabulary:
                generate with speculative decoding, the draft proposing
                `num_speculative_tokens` tokens per step and this model
                verifying them in one call (see
                `keras_gen.samplers.SpeculativeSampler`). Greedy output is
                unchanged; sampled output keeps this model's distribution.
            num_speculative_tokens: int >= 1, tokens proposed per step
                (default 4) with `draft_model` or `prompt_lookup_ngram`.
            prompt_lookup_ngram: int >= 1: speculative decoding with no
                draft model; proposals are the tokens that followed the
                latest earlier occurrence of the row's last n-gram.
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(2e-5)
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        self.assisted_samplers = {}
        self.sampler = self._assisted_sampler(
            samplers.get(sampler),
            draft_model,
            num_speculative_tokens,
            prompt_lookup_ngram,
        )
        self.processors = processors_lib.get_list(processors)
        self.generate_jit_compile = jit_compile
        self.generate_function = None
        # One compiled program per processor chain structure (the chain is
        # the program's structure; its numbers are inputs).
        self.generate_functions = {}
        self.stream_functions = {}

    def _assisted_sampler(
        self, sampler, draft_model, num_speculative_tokens, prompt_lookup_ngram
    ):
        """`sampler`, or a `SpeculativeSampler` around it (one per setting,
        kept so that its compiled programs are reused)."""
        if draft_model is None and prompt_lookup_ngram is None:
            if num_speculative_tokens is not None:
                raise ValueError(
                    "`num_speculative_tokens` needs `draft_model` or "
                    "`prompt_lookup_ngram`."
                )
            return sampler
        if isinstance(sampler, SpeculativeSampler):
            sampler = sampler.sampler
        draft = getattr(draft_model, "backbone", draft_model)
        if num_speculative_tokens is None:
            num_speculative_tokens = 4
        key = (id(sampler), id(draft), num_speculative_tokens, prompt_lookup_ngram)
        if key not in self.assisted_samplers:
            self.assisted_samplers[key] = SpeculativeSampler(
                sampler,
                self.backbone,
                num_speculative_tokens,
                draft=draft,
                prompt_lookup_ngram=prompt_lookup_ngram,
            )
        return self.assisted_samplers[key]

    def _generation_variables(self, sampler):
        """The variables a generation program reads: the draft's too."""
        variables = list(self.variables)
        draft = getattr(sampler, "draft", None)
        if draft is not None:
            seen = {id(v) for v in variables}
            variables += [v for v in draft.variables if id(v) not in seen]
        return variables

    def quantize(self, mode=None, config=None, quantize_activations=False, **kwargs):
        """Quantize the weights with Keras and drop the compiled programs
        built for the float weights. Generation then reads the int8 weights.

        `"int8"` is weight-only by default: int8 weights with one scale per
        output channel, float activations. `quantize_activations=True` keeps
        Keras' own int8 scheme, which also quantizes each row of activations
        at run time: faster under XLA, further from the float model. Other
        arguments go to `keras.Model.quantize`.
        """
        if config.mode == "int8" and not quantize_activations:
            # Keras has already resolved `mode` into a `config`.
            config = keras.quantizers.Int8QuantizationConfig(
                weight_quantizer=config.weight_quantizer,
                activation_quantizer=None,
            )
        with warnings.catch_warnings():
            # Norms and attention have nothing to quantize; Keras says so.
            warnings.filterwarnings("ignore", "Layer .* does not have a `quantize`")
            self.backbone.quantize(mode, config=config, **kwargs)
        self.generate_function = None
        self.generate_functions = {}
        self.stream_functions = {}

    def next(self, prompt, state, index):
        """One decoding step: logits for position `index`.

        Runs the token at `index - 1` against the cache and returns
        `(logits (batch, vocab), hidden_states (batch, hidden), state)`.
        """
        token = backend.slice(prompt, index - 1, 1, axis=1)
        logits, hidden_states, state = self.backbone.call_with_state(
            token, state, index - 1
        )
        return logits[:, 0, :], hidden_states[:, 0, :], state

    def _start_loop(
        self, inputs, prefill_length, outputs, processors=(), sampler=None
    ):
        """Seed the cache from the prompt; the loop state before step one."""
        sampler = self.sampler if sampler is None else sampler
        token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
        batch, cache_length = ops.shape(token_ids)
        hidden_states, state = self.backbone.build_state(
            token_ids[:, :prefill_length],
            mask[:, :prefill_length],
            # Speculative decoding verifies a few positions past the end.
            cache_length=cache_length + getattr(sampler, "lookahead", 0),
        )
        # Rows are aligned left: the loop starts at the shortest prompt and
        # keeps prompt tokens wherever a longer row still has them.
        index = ops.min(ops.sum(ops.cast(mask, "int32"), axis=1))
        vocabulary_size = self.backbone.vocabulary_size
        shapes = {
            "log_probs": (batch, cache_length),
            "scores": (batch, cache_length, vocabulary_size),
            "logits": (batch, cache_length, vocabulary_size),
            "hidden_states": (batch, cache_length, self.backbone.hidden_dim),
        }
        with sampler.bind(inputs["sampler"]):
            loop = sampler.start(
                token_ids,
                state,
                index,
                mask=mask,
                stop_token_ids=inputs["stop_token_ids"],
                hidden_states=hidden_states,
                end=inputs["end"],
                seed=inputs["seed"],
                outputs={name: ops.zeros(shapes[name]) for name in outputs},
                stop_sequences=inputs.get("stop_sequences"),
            )
        if hasattr(sampler, "start_draft"):
            loop = sampler.start_draft(
                loop, token_ids[:, :prefill_length], mask[:, :prefill_length]
            )
        loop = {
            **loop,
            "parameters": inputs["sampler"],
            "processor_parameters": inputs.get("processors", []),
        }
        if sampler.first_step_from_prompt:
            loop = self._first_step(loop, hidden_states, processors, sampler)
        return loop

    def _first_step(self, loop, hidden_states, processors, sampler):
        """Take the first step on logits from the prompt's forward pass.

        Seeding the cache already computed the last prompt token's hidden
        state, so the first token needs no decode step (which would run the
        model again and read the whole cache): time to first token follows
        the prompt's length, not `max_length`. A loop that runs at most
        once, so that nothing is generated when every row is at its end.
        """
        first = loop["index"]

        def prompt_next(prompt, state, index):
            last = backend.slice(hidden_states, index - 1, 1, axis=1)[:, 0]
            return self.backbone.compute_logits(last), last, state

        with sampler.bind(loop["parameters"]), sampler.use_processors(
            processors, loop["processor_parameters"]
        ):
            return backend.while_loop(
                lambda loop: ops.logical_and(
                    sampler.cond(loop), loop["index"] == first
                ),
                lambda loop: sampler.step(prompt_next, loop),
                loop,
                # On torch: one step is not worth a compiled graph.
                jit_compile=False,
            )

    def _run_loop(self, loop, processors=(), sampler=None):
        """Run the sampler loop until it ends or reaches `loop["until"]`."""
        sampler = self.sampler if sampler is None else sampler
        with sampler.bind(loop["parameters"]), sampler.use_processors(
            processors, loop["processor_parameters"]
        ):
            return sampler.run(self.next, loop)

    def generate_step(
        self, inputs, prefill_length, outputs=(), processors=(), sampler=None
    ):
        """Generate for one padded batch; the body of the compiled program.

        Args:
            inputs: a dict of tensors. `token_ids` and `padding_mask`,
                `(batch, cache_length)`: prompts aligned left. `end`,
                `(batch,)`: where each row stops at the latest.
                `stop_token_ids` `(slots,)` (-1 for unused slots), `seed`
                `(2,)`, `sampler`: the sampler's tunable numbers,
                `processors`: one dict of tunable numbers per processor,
                and optionally `stop_sequences` (see
                `keras_gen.samplers.stopping`).
            prefill_length: int, how many leading positions hold prompt
                tokens; the cache is seeded from these only.
            outputs: names of the per-step outputs to return (`"logits"`,
                `"scores"`, `"log_probs"`, `"hidden_states"`).
            processors: the logits processors: the program's structure.
            sampler: the sampler, by default `self.sampler`.

        Returns:
            A dict: `token_ids` `(batch, cache_length)` and each requested
            output, `(batch, cache_length, ...)`, written at the position of
            the token it produced. A sampler that returns `n` sequences per
            prompt (beam search) gives `batch * n` rows and adds
            `sequence_scores`. Speculative decoding adds `lengths`,
            `accepted_tokens` and `draft_tokens`, `(batch,)` each.
        """
        sampler = self.sampler if sampler is None else sampler
        loop = self._start_loop(inputs, prefill_length, outputs, processors, sampler)
        loop = self._run_loop(loop, processors, sampler)
        return program_outputs(loop, sampler.finish(loop))

    def make_generate_function(self, processors=None, sampler=None):
        """Build (once) and return the compiled generate function.

        `processors` (default: those of `compile`) are the program's
        structure: each chain structure compiles once and is cached until
        `compile()`. Chains that differ only in their numbers share it.
        `sampler` (default: that of `compile`) is structure too.
        """
        processors = self.processors if processors is None else processors
        sampler = self.sampler if sampler is None else sampler
        key = (processors_lib.structure(processors), id(sampler))
        if key not in self.generate_functions:
            self.generate_functions[key] = backend.compile_function(
                functools.partial(
                    self.generate_step, processors=processors, sampler=sampler
                ),
                self._generation_variables(sampler),
                jit_compile=self.generate_jit_compile,
                static_argnames=("prefill_length", "outputs"),
            )
        self.generate_function = self.generate_functions[key]
        return self.generate_function

    def make_stream_functions(self, processors=None, sampler=None):
        """Build (once) the compiled `(start, advance)` pair of a stream.

        `start(inputs, prefill_length, outputs)` seeds the cache and returns
        the loop state; `advance(loop)` runs the same sampler step up to
        `loop["until"]`. The loop state is donated where the backend can.
        Cached per processor chain structure, like `make_generate_function`.
        """
        processors = self.processors if processors is None else processors
        sampler = self.sampler if sampler is None else sampler
        key = (processors_lib.structure(processors), id(sampler))
        if key not in self.stream_functions:
            compile_function = functools.partial(
                backend.compile_function,
                variables=self._generation_variables(sampler),
                jit_compile=self.generate_jit_compile,
            )
            arguments = {"processors": processors, "sampler": sampler}
            self.stream_functions[key] = (
                compile_function(
                    functools.partial(self._start_loop, **arguments),
                    static_argnames=("prefill_length", "outputs"),
                ),
                compile_function(
                    functools.partial(self._run_loop, **arguments),
                    donate_argnums=(0,),
                ),
            )
        return self.stream_functions[key]

    def generate(
        self,
        inputs,
        max_length=None,
        *,
        max_new_tokens=None,
        stop_token_ids="auto",
        strip_prompt=False,
        seed=None,
        return_dict=False,
        output_scores=False,
        output_logits=False,
        output_log_probs=False,
        output_hidden_states=False,
        processors=None,
        stop_sequences=None,
        stop_strings=None,
        include_stop_string=False,
        streamer=None,
        max_time=None,
        stream_chunk_size=None,
        draft_model=None,
        num_speculative_tokens=None,
        prompt_lookup_ngram=None,
    ):
        """Generate text or token ids from one prompt or a batch.

        Args:
            inputs: one prompt or a batch: a list of token ids, a list of
                such lists (ragged), a `{"token_ids", "padding_mask"}` dict
                of arrays, or, with a tokenizer, a string or list of strings.
                The output has the form of the input.
            max_length: int, prompt plus new tokens per row. For dict inputs
                it defaults to the width of `token_ids`.
            max_new_tokens: int, new tokens per row. Give this or
                `max_length`.
            stop_token_ids: `"auto"` (the tokenizer's end tokens, if any),
                `None` (never stop early) or a list of ids. A row stops
                after emitting one; generation ends when every row has.
            strip_prompt: bool, return only the new tokens.
            seed: int or `None`. The same seed gives the same tokens.
            return_dict: bool. Return a `keras_gen.streaming.GenerationOutput`
                (new tokens, text, finish reasons, sequences and the
                requested per-step outputs) instead of the input's form.
            output_scores, output_logits, output_log_probs,
            output_hidden_states: bool, add these per-step arrays to the
                record (see `GenerationOutput`).
            processors: logits processors for this call, replacing those of
                `compile` (`[]` for none).
            stop_sequences: list of token id lists; a row stops once its
                tokens end with one (matched in the compiled loop; the
                sequence may start in the prompt). Output is cut after it.
            stop_strings: list of strings (needs a tokenizer); a row stops
                once its text contains one, however the tokens split it.
            include_stop_string: bool. Keep the stop string (and the rest of
                its last token) in the returned text.
            streamer: a `keras_gen.streaming.BaseStreamer`; it gets each
                chunk as it is produced.
            max_time: float, seconds. Rows still running then end with
                finish reason `"time"` (checked between stream chunks).
            stream_chunk_size: int, steps per chunk when streaming.
            draft_model, num_speculative_tokens, prompt_lookup_ngram:
                speculative decoding for this call (see `compile`); the
                record of `return_dict=True` then holds per-row
                `accepted_tokens` and `draft_tokens`.

        Examples:
        >>> lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=4)  # doctest: +SKIP
        [[1, 2, 3, 9, 9, 9, 9], [4, 5, 7, 7, 7, 7]]
        """
        request, sampler = self._prepare(
            inputs, max_length, max_new_tokens, stop_token_ids, seed,
            (output_scores, output_logits, output_log_probs, output_hidden_states),
            processors, stop_sequences, stop_strings, include_stop_string,
            (draft_model, num_speculative_tokens, prompt_lookup_ngram),
        )
        if streamer is not None or max_time is not None:
            chunks = self._stream(
                request, streamer, max_time, stream_chunk_size, sampler
            )
            record = GenerationOutput.join(chunks)
        else:
            # Called without arguments for the compiled chain, so that a
            # subclass's `make_generate_function()` override is used.
            if sampler is not self.sampler:
                generate_function = self.make_generate_function(
                    request.processors, sampler
                )
            elif processors is None:
                generate_function = self.make_generate_function()
            else:
                generate_function = self.make_generate_function(request.processors)
            with backend.no_grad():
                outputs = generate_function(
                    request.program_inputs, **request.static_arguments
                )
            record = request.read(outputs, request.cache_length)
        return record if return_dict else request.format(record, strip_prompt)

    def stream(
        self,
        inputs,
        max_length=None,
        *,
        max_new_tokens=None,
        stop_token_ids="auto",
        seed=None,
        output_scores=False,
        output_logits=False,
        output_log_probs=False,
        output_hidden_states=False,
        processors=None,
        stop_sequences=None,
        stop_strings=None,
        include_stop_string=False,
        max_time=None,
        stream_chunk_size=None,
        draft_model=None,
        num_speculative_tokens=None,
        prompt_lookup_ngram=None,
    ):
        """Generate step by step: an iterator of `GenerationOutput` chunks.

        Takes the arguments of `generate`. Each chunk holds, per row, the
        tokens (and text, and requested per-step outputs) produced since the
        previous chunk and the finish reason of rows that ended. The chunks
        join (`GenerationOutput.join`) into what `generate(...,
        return_dict=True)` returns. Leaving the loop early stops generation.

        Examples:
        >>> for chunk in lm.stream([1, 2, 3], max_new_tokens=8):  # doctest: +SKIP
        ...     print(chunk.token_ids[0])
        """
        request, sampler = self._prepare(
            inputs, max_length, max_new_tokens, stop_token_ids, seed,
            (output_scores, output_logits, output_log_probs, output_hidden_states),
            processors, stop_sequences, stop_strings, include_stop_string,
            (draft_model, num_speculative_tokens, prompt_lookup_ngram),
        )
        return self._stream(request, None, max_time, stream_chunk_size, sampler)

    def _prepare(
        self, inputs, max_length, max_new_tokens, stop_token_ids, seed,
        output_flags, processors, stop_sequences, stop_strings,
        include_stop_string, assistance,
    ):
        """The host-side request and the sampler of one generate/stream call."""
        request = GenerationRequest(
            self, inputs, max_length, max_new_tokens, stop_token_ids, seed,
            outputs=_requested_outputs(*output_flags),
            processors=processors,
            stop_sequences=stop_sequences,
            stop_strings=stop_strings,
            include_stop_string=include_stop_string,
        )
        return request, self._assisted_sampler(self.sampler, *assistance)

    def _stream(self, request, streamer, max_time, chunk_size, sampler=None):
        # Arguments are checked here, at the call, not at the first chunk.
        if chunk_size is None:
            chunk_size = self.stream_chunk_size
        chunk_size = check_count("stream_chunk_size", chunk_size)
        if max_time is not None:
            max_time = check_positive("max_time", max_time)
        if request.rows_per_prompt != 1:
            raise ValueError(
                "A stream returns one sequence per prompt: set the sampler's "
                f"`num_return_sequences` to 1 (it is {request.rows_per_prompt})."
            )
        return self._chunks(request, streamer, max_time, chunk_size, sampler)

    def _chunks(self, request, streamer, max_time, chunk_size, sampler):
        started = time.monotonic()
        start, advance = self.make_stream_functions(request.processors, sampler)
        try:
            with backend.no_grad():
                loop = start(request.program_inputs, **request.static_arguments)
                # The first token may come with the start: hand it out now.
                advanced = sampler.first_step_from_prompt
                while not request.done:
                    if not advanced:
                        index = int(ops.convert_to_numpy(loop["index"]))
                        until = min(index + chunk_size, request.cache_length)
                        loop["until"] = ops.convert_to_tensor(until, "int32")
                        loop = advance(loop)
                    advanced = False
                    time_is_up = (
                        max_time is not None
                        and time.monotonic() - started >= max_time
                    )
                    # A speculative chunk is `chunk_size` steps (each of one
                    # or more tokens per row); `lengths` says how far.
                    token_ids, limits = sampler.stream_view(loop)
                    chunk = request.read(
                        program_outputs(loop, token_ids), limits, time_is_up
                    )
                    if streamer is not None:
                        streamer.put(chunk)
                    yield chunk
        finally:
            # Whether the stream ended, broke off or raised: drop the cache.
            loop = None
            if streamer is not None:
                streamer.end()

    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """Load a model and its tokenizer from a local Hugging Face folder.

        The folder holds `config.json`, `*.safetensors` weights (one file or
        shards with an index) and, optionally, `tokenizer.json`,
        `tokenizer_config.json` and `generation_config.json`. Supported:
        GPT-2, Llama, Mistral and Qwen2. Nothing is downloaded, and pickle
        (`.bin`) weights are refused. Without a tokenizer file the model
        still loads and takes token ids.

        Args:
            path: the model folder.
            dtype: `None` (the checkpoint's own dtype), `"float32"`,
                `"bfloat16"` or `"float16"`.

        Examples:
        >>> lm = CausalLM.from_pretrained("path/to/model")  # doctest: +SKIP
        >>> lm.generate("The sky is", max_new_tokens=8)  # doctest: +SKIP
        """
        from keras_gen.models import checkpoint

        causal_lm_class = None if cls is CausalLM else cls
        return checkpoint.load_causal_lm(path, dtype, causal_lm_class)

    @classmethod
    def from_preset(cls, preset, dtype=None):
        """Load a model bundled with keras-gen, or a local model folder.

        Args:
            preset: a preset name (`"demo"`: see `keras_gen.presets`) or
                the path of a Hugging Face model folder.
            dtype: as in `from_pretrained`.

        Examples:
        >>> lm = CausalLM.from_preset("demo")  # doctest: +SKIP
        >>> lm.generate("The for statement", max_new_tokens=16)  # doctest: +SKIP
        """
        from keras_gen import presets

        if isinstance(preset, str) and preset in presets.list_presets():
            preset = presets.preset_path(preset)
        elif not os.path.isdir(os.fspath(preset)):
            raise ValueError(
                f"{preset!r} is neither a bundled preset "
                f"({presets.list_presets()}) nor a model folder."
            )
        return cls.from_pretrained(preset, dtype=dtype)

    def save_pretrained(self, path):
        """Write the model (and tokenizer) as a Hugging Face folder.

        `transformers.AutoModelForCausalLM.from_pretrained(path)` loads it.
        """
        from keras_gen.models import checkpoint

        checkpoint.save_causal_lm(self, path)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(
            config["backbone"]
        )
        return cls(**config)
