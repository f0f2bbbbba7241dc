"""The causal language model task: compile once, generate many times."""

import copy
import functools
import json
import os
import warnings

import keras

from keras_gen import backend
from keras_gen import processors as processors_lib
from keras_gen import samplers
from keras_gen.generation import generate_loop
from keras_gen.generation import options as options_lib
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.generation.generation_request import GenerationRequest
from keras_gen.generation.program_cache import ProgramCache
from keras_gen.kernels import rows as rows_lib
from keras_gen.layers.mixture_of_experts import ROUTER_NAME
from keras_gen.models.backbone import Backbone
from keras_gen.samplers.speculative_decoding import Speculation
from keras_gen.samplers.speculative_decoding import SpeculativeSampler
from keras_gen.streaming import tool_call_parser
from keras_gen.streaming.generation_output import GenerationOutput
from keras_gen.tokenizers.tokenizer import TOKENIZER_FILE
from keras_gen.tokenizers.tokenizer import Tokenizer
from keras_gen.training import causal_lm_preprocessor as preprocessing
from keras_gen.training.causal_lm_preprocessor import CausalLMPreprocessor
from keras_gen.utils.checks import check_count

# Compiled programs a model keeps (least recently used dropped first): one
# per sampler structure, processor chain structure and kind (generate, or a
# stream's start/advance pair).
MAX_PROGRAMS = 16
# The longest rows `fit` makes of text by default (keras-hub's default).
PREPROCESSOR_LENGTH = 1024
# `fit` and `evaluate` keywords that go to the text preprocessor.
PREPROCESSING_OPTIONS = preprocessing.OPTIONS


def checked_speculation(draft_model, num_speculative_tokens, prompt_lookup_ngram):
    """A `Speculation`, with the draft model checked."""
    draft = getattr(draft_model, "backbone", draft_model)
    if draft is not None and not isinstance(draft, Backbone):
        raise TypeError(
            "`draft_model` must be a `CausalLM` (or its `Backbone`) with the "
            f"model's vocabulary. Received: draft_model={draft_model!r}"
        )
    # The options' own checks (and bounds).
    GenerationConfig(
        num_speculative_tokens=num_speculative_tokens,
        prompt_lookup_ngram=prompt_lookup_ngram,
    )
    return Speculation(draft, num_speculative_tokens, prompt_lookup_ngram)


def _quantizable(layer):
    # Experts' routers stay float: an expert choice is discrete, and a
    # router is a tiny matrix.
    return layer.name != ROUTER_NAME


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

    def __init__(self, backbone, tokenizer=None, generation_config=None, **kwargs):
        super().__init__(**kwargs)
        self.backbone = backbone
        self.tokenizer = tokenizer
        self.generation_config = GenerationConfig.from_dict(generation_config or {})
        self.sampler = None
        self.generate_function = None
        # Steps per compiled chunk of a stream.
        self.stream_chunk_size = 4
        self.programs = ProgramCache(MAX_PROGRAMS)
        self._preprocessor = None
        self.compile()
        # The backbone is built; the task adds no weights of its own.
        self.built = True

    def call(self, inputs, training=False):
        """Logits `(batch, length, vocab)` for token ids, or for a dict of
        `token_ids` and `padding_mask` (0 on padding, on either side)."""
        padding_mask = None
        if isinstance(inputs, dict):
            inputs, padding_mask = inputs["token_ids"], inputs.get("padding_mask")
        hidden_states = self.backbone(
            inputs, padding_mask=padding_mask, training=training
        )
        return self.backbone.compute_logits(hidden_states)

    def compile(
        self,
        optimizer="auto",
        loss="auto",
        *,
        weighted_metrics="auto",
        sampler=None,
        processors=None,
        jit_compile=True,
        draft_model=None,
        num_speculative_tokens=None,
        prompt_lookup_ngram=None,
        **kwargs,
    ):
        """Configure training and generation.

        A call that names only generation settings (`sampler`,
        `processors`, speculation) changes generation only: the optimizer,
        its state (iterations, moments) and the loss stay as they are.

        Args:
            optimizer: as in `keras.Model.compile`; `"auto"` keeps the
                model's optimizer, or makes `Adam(2e-5)` if it has none.
            loss: as in `keras.Model.compile`; `"auto"` is sparse
                categorical cross-entropy on logits, averaged over the
                tokens that count (`sample_weight`: `fit` on text weighs
                padding, and prompts if masked, by 0).
            weighted_metrics: as in `keras.Model.compile`; `"auto"` is
                token accuracy over the same tokens.
            sampler: `None` (the model's `generation_config` decides: greedy
                unless it says otherwise), a sampler name (`"greedy"`,
                `"random"`, `"top_k"`, `"top_p"`, `"min_p"`, `"beam"`,
                `"contrastive"`) or a `keras_gen.samplers.Sampler`. It
                replaces the sampling options of `generation_config`.
            processors: `None` (from `generation_config`), or
                `keras_gen.processors.LogitsProcessor`s (or their names or
                configs) applied in order to every step's logits before the
                sampler's temperature; they replace the processor options of
                `generation_config`.
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
        training = (optimizer, loss, weighted_metrics) != ("auto",) * 3 or kwargs
        current = getattr(self, "optimizer", None) if self.compiled else None
        if training or current is None:
            if optimizer == "auto":
                optimizer = current or keras.optimizers.Adam(2e-5)
            if loss == "auto":
                loss = keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True, reduction="mean_with_sample_weight"
                )
            if weighted_metrics == "auto":
                weighted_metrics = [keras.metrics.SparseCategoricalAccuracy("accuracy")]
            super().compile(
                optimizer=optimizer,
                loss=loss,
                weighted_metrics=weighted_metrics,
                **kwargs,
            )
        speculation = checked_speculation(
            draft_model, num_speculative_tokens, prompt_lookup_ngram
        )
        if num_speculative_tokens is not None and not speculation.enabled:
            raise ValueError(
                "`num_speculative_tokens` needs `draft_model` or `prompt_lookup_ngram`."
            )
        speculation.check(self.backbone)
        sampler = None if sampler is None else samplers.get(sampler)
        if sampler is not None and speculation.enabled:
            sampler = speculation.sampler(sampler, self.backbone)
        processors = None if processors is None else processors_lib.get_list(processors)
        self.speculation = speculation
        self.sampler = sampler
        self.processors = processors
        self.generate_jit_compile = jit_compile
        # Compiled programs stay: they are found by structure, and the
        # weights they read have not changed.
        self.generate_function = None

    @property
    def preprocessor(self):
        """The `keras_gen.training.CausalLMPreprocessor` that `fit` and
        `evaluate` read text with: made from the tokenizer on first use
        (rows of at most 1024 tokens, or the model's positions); set it to
        change the defaults."""
        if self._preprocessor is None:
            limit = self.backbone.max_sequence_length or PREPROCESSOR_LENGTH
            self._preprocessor = CausalLMPreprocessor(
                self.tokenizer, sequence_length=min(limit, PREPROCESSOR_LENGTH)
            )
        return self._preprocessor

    @preprocessor.setter
    def preprocessor(self, preprocessor):
        if preprocessor is not None and not isinstance(
            preprocessor, CausalLMPreprocessor
        ):
            raise TypeError(
                "`preprocessor` must be a `keras_gen.training.CausalLMPreprocessor` "
                f"or None. Received: {preprocessor!r}"
            )
        self._preprocessor = preprocessor

    def _training_data(self, x, y, batch_size, kwargs):
        """`(x, y, kwargs)` with text (and text `validation_data`) turned
        into arrays or a dataset by the preprocessor, whose options are
        taken out of `kwargs`."""
        options = {k: kwargs.pop(k) for k in list(kwargs) if k in PREPROCESSING_OPTIONS}
        check_count("batch_size", batch_size, allow_none=True)
        if isinstance(x, (list, tuple)) and not x:
            raise ValueError("`x` is empty: there is nothing to train or evaluate on.")
        if not preprocessing.is_text(x):
            if options:
                raise ValueError(
                    f"{sorted(options)} apply to text; `x` is not text (strings, "
                    "pairs, conversations or a dataset of strings)."
                )
            return x, y, kwargs
        if y is not None or kwargs.get("sample_weight") is not None:
            raise ValueError(
                "Text is its own label: give `fit` text alone, without `y` or "
                "`sample_weight` (the loss is weighed by the preprocessor)."
            )
        preprocessor = self.preprocessor.replace(**options)

        def convert(data):
            """A dataset, or `(inputs, labels, sample_weight)` arrays."""
            if preprocessing.is_dataset(data):
                return preprocessor.dataset(data, batch_size)
            return preprocessor(data)

        x = convert(x)
        if not preprocessing.is_dataset(x):
            x, y, kwargs["sample_weight"] = x
        validation = kwargs.get("validation_data")
        if validation is not None and preprocessing.is_text(validation):
            kwargs["validation_data"] = convert(validation)
        return x, y, kwargs

    def fit(self, x=None, y=None, batch_size=None, **kwargs):
        """Train, as `keras.Model.fit`, on token ids or on text.

        Text (strings, `(prompt, completion)` pairs, chat conversations,
        or a `tf.data.Dataset` of strings or pairs; `validation_data` too)
        goes through `lm.preprocessor`: see
        `keras_gen.training.CausalLMPreprocessor`. Its options
        `sequence_length`, `packing`, `mask_prompt`, `add_start_token`
        and `add_end_token` may be given here for one call.

        Examples:
        >>> lm.fit(["first text", "second text"], epochs=3, batch_size=2)  # doctest: +SKIP
        >>> lm.fit([("Question?", "Answer.")], sequence_length=128)  # doctest: +SKIP
        """
        x, y, kwargs = self._training_data(x, y, batch_size, kwargs)
        self._check_optimizer()
        return super().fit(x, y, batch_size=batch_size, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, **kwargs):
        """Evaluate, as `keras.Model.evaluate`, on token ids or on text
        (read as `fit` reads it)."""
        x, y, kwargs = self._training_data(x, y, batch_size, kwargs)
        return super().evaluate(x, y, batch_size=batch_size, **kwargs)

    def _check_optimizer(self):
        """A built optimizer tracks the weights that were trainable then."""
        optimizer = self.optimizer
        if optimizer is None or not optimizer.built:
            return
        tracked = getattr(optimizer, "_trainable_variables", None)
        if tracked is not None and {v.path for v in tracked} != {
            v.path for v in self.trainable_variables
        }:
            raise ValueError(
                "The trainable weights changed since the optimizer was built "
                "(for instance `backbone.enable_lora` after `fit`): start a new "
                "optimizer with `lm.compile(optimizer=...)`."
            )

    def clear_programs(self):
        """Drop every compiled program (`quantize` does: the weights change)."""
        self.programs.clear()
        self.generate_function = None

    def _generation_variables(self, sampler):
        """The variables a generation program reads: the sampler's models'
        (a speculative draft's) too."""
        variables = list(self.variables)
        seen = {id(v) for v in variables}
        return variables + [v for v in sampler.model_variables if id(v) not in seen]

    def quantize(self, mode=None, config=None, quantize_activations=True, **kwargs):
        """Quantize the weights with Keras and drop the compiled programs
        built for the float weights. Generation then reads the int8 weights.

        `"int8"`: int8 weights with one scale per output channel (embedding
        rows: one per row), and each row of activations quantized to int8 as
        it reaches a kernel, so that the products run on int8 (as
        CTranslate2's int8 and llama.cpp's q8_0 do; Keras' own int8
        scheme). `quantize_activations=False` keeps activations float
        (weight-only): closer to the float model, slower. `"int4"`:
        weight-only int4 on the blocks' `Dense` projections (Keras' groups
        of 128 inputs with a scale and a zero point each; `config=` for
        another `block_size`), the embeddings and the output head kept.
        Other arguments go to `keras.Model.quantize`.
        """
        if config.mode == "int8" and not quantize_activations:
            # Keras has already resolved `mode` into a `config`.
            config = keras.quantizers.Int8QuantizationConfig(
                weight_quantizer=config.weight_quantizer,
                activation_quantizer=None,
            )
        if config.mode == "int4":
            # Weight-only int4 on the blocks' projections; the embeddings
            # and the output head stay as they are (as GPTQ and AWQ
            # checkpoints keep them).
            head = getattr(self.backbone, "lm_head", None)
            kwargs.setdefault(
                "filters",
                lambda layer: (
                    isinstance(layer, keras.layers.Dense)
                    and layer is not head
                    and _quantizable(layer)
                ),
            )
        kwargs.setdefault("filters", _quantizable)
        with warnings.catch_warnings():
            # Norms and attention have nothing to quantize; Keras says so.
            warnings.filterwarnings("ignore", "Layer .* does not have a `quantize`")
            self.backbone.quantize(mode, config=config, **kwargs)
        self.clear_programs()

    def next(self, prompt, state, index):
        """One decoding step: logits for position `index`.

        Runs the token at `index - 1` against the cache and returns
        `(logits (batch, vocab), hidden_states (batch, hidden), state)`.
        `index` is a scalar, or one position per row (the serving engine's
        slots).
        """
        token = rows_lib.read(prompt, index - 1)[:, None]
        logits, hidden_states, state = self.backbone.call_with_state(
            token, state, index - 1
        )
        return logits[:, 0, :], hidden_states[:, 0, :], state

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
                `keras_gen.kernels.stopping`).
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
        sampler, processors = self._defaults(sampler, processors)
        return generate_loop.generate_step(
            self, inputs, prefill_length, outputs, processors, sampler
        )

    def make_generate_function(self, processors=None, sampler=None):
        """Build (once) and return the compiled generate function.

        The program is found by structure: the sampler's class and the
        settings that fix its shapes, and the processor chain's structure
        (see `get_structure`). A new sampler or processor object with new
        numbers reuses the program built for the first one of its
        structure; the numbers are program inputs. At most `MAX_PROGRAMS`
        programs are kept, the least recently used dropped first;
        `compile()` keeps them (it resets `generate_function`), `quantize()`
        drops them.

        Args:
            processors: the logits processors; by default those a call
                with no options would use.
            sampler: the sampler; by default that of such a call. An
                override of this method takes both and passes them on.
        """
        sampler, processors = self._defaults(sampler, processors)

        def build(sampler, processors):
            return backend.compile_function(
                functools.partial(
                    self.generate_step, processors=processors, sampler=sampler
                ),
                self._generation_variables(sampler),
                jit_compile=self.generate_jit_compile,
                static_argnames=("prefill_length", "outputs"),
            )

        self.generate_function = self._program("generate", sampler, processors, build)
        return self.generate_function

    def make_stream_functions(self, processors=None, sampler=None):
        """Build (once) the compiled `(start, advance)` pair of a stream.

        `start(inputs, prefill_length, outputs)` seeds the cache and returns
        the loop state; `advance(loop, attention_span)` runs the same
        sampler step up to `loop.until`, attending over the cache's first
        `attention_span` positions (`None`: all). The loop state is donated
        where the backend can. Found by structure, like
        `make_generate_function`.
        """
        sampler, processors = self._defaults(sampler, processors)

        def build(sampler, processors):
            compile_function = functools.partial(
                backend.compile_function,
                variables=self._generation_variables(sampler),
                jit_compile=self.generate_jit_compile,
            )
            arguments = {"processors": processors, "sampler": sampler}
            return (
                compile_function(
                    functools.partial(generate_loop.start, self, **arguments),
                    static_argnames=("prefill_length", "outputs"),
                ),
                compile_function(
                    functools.partial(generate_loop.run, self, **arguments),
                    static_argnames=("attention_span",),
                    donate_argnums=(0,),
                ),
            )

        return self._program("stream", sampler, processors, build)

    def _program(self, kind, sampler, processors, build):
        """The cached program of this kind and structure, or a new one.

        `build(sampler, processors)` builds it around copies of the call's
        objects, which the program never changes (it binds each call's
        numbers into copies of its own: see `Sampler.bound`).
        """
        key = (
            kind,
            self.generate_jit_compile,
            sampler.get_structure(),
            processors_lib.structure(processors),
            # Adapters add weights: a program reads the weights it was built for.
            self.backbone.weights_structure,
        )
        return self.programs.get(
            key,
            lambda: build(copy.copy(sampler), tuple(copy.copy(p) for p in processors)),
        )

    def _defaults(self, sampler, processors):
        """`(sampler, processors)`, each as given or as a call with no
        options would have them."""
        if sampler is None or processors is None:
            _, default_sampler, default_processors, _ = self._resolve({}, {})
            sampler = default_sampler if sampler is None else sampler
            processors = default_processors if processors is None else processors
        return sampler, tuple(processors)

    def generate(
        self,
        inputs,
        generation_config=None,
        *,
        sampler=None,
        processors=None,
        draft_model=None,
        strip_prompt=False,
        return_dict=False,
        streamer=None,
        stream_chunk_size=None,
        tools=None,
        chat_template_kwargs=None,
        tool_choice=None,
        parallel_tool_calls=True,
        **options,
    ):
        """Generate text or token ids from one prompt or a batch.

        Options come from, strongest first: the keyword `options` of this
        call, `generation_config`, what `compile(sampler=...,
        processors=...)` set, then `self.generation_config` (the model
        folder's `generation_config.json`). See
        `keras_gen.GenerationConfig` for every option.

        Args:
            inputs: one prompt or a batch: a list of token ids, a list of
                such lists (ragged), a `{"token_ids", "padding_mask"}` dict
                of arrays, or, with a tokenizer, a string or list of strings,
                or a conversation (a list of message dicts, rendered with the
                tokenizer's chat template and its generation prompt) or a
                list of them. The output has the form of the input; a
                conversation's is the reply's text.
            generation_config: a `keras_gen.GenerationConfig` (or a dict of
                options) for this call.
            sampler: a `keras_gen.samplers.Sampler` (or name) for this call,
                instead of the compiled one.
            processors: logits processors for this call, replacing those of
                `compile` and of `generation_config` (`[]` for none).
            draft_model: a `CausalLM` with the same vocabulary: speculative
                decoding for this call (see `compile`); the record of
                `return_dict=True` then holds per-row `accepted_tokens` and
                `draft_tokens`.
            strip_prompt: bool, return only the new tokens.
            return_dict: bool. Return a `keras_gen.streaming.GenerationOutput`
                (new tokens, text, finish reasons, sequences and the
                requested per-step outputs) instead of the input's form.
            streamer: a `keras_gen.streaming.BaseStreamer`; it gets each
                chunk as it is produced.
            stream_chunk_size: int, steps per chunk when streaming.
            tools: for chat `inputs`: a list of tool JSON schemas for the
                chat template (OpenAI's `{"type": "function", ...}`).
            chat_template_kwargs: for chat `inputs`: a dict of more
                template variables, such as `{"enable_thinking": False}`.
            tool_choice: for chat `inputs` with `tools`: `"auto"` (or
                `None`): the reply is free text, and a call the model opens
                (in the template's form: `<tool_call>`, `[TOOL_CALLS]`,
                Llama 3's `{`) is held to the tools' JSON schemas from there
                on (a structured output); `"required"` (or `{"type":
                "function", "function": {"name": ...}}`): the reply is calls
                of the tools (of that one); `"none"`: no constraint. A
                thinking template's constraint starts after `</think>`.
                `return_dict=True` gives the parsed calls
                (`GenerationOutput.messages`).
            parallel_tool_calls: bool, whether a reply may hold more than
                one call (default `True`).
            **options: `GenerationConfig` fields for this call, such as
                `max_new_tokens`, `temperature`, `top_k`, `seed`,
                `stop_strings` or `output_log_probs`. `stop_token_ids=None`
                never stops early (as in keras-hub).

        Examples:
        >>> lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=4)  # doctest: +SKIP
        [[1, 2, 3, 9, 9, 9, 9], [4, 5, 7, 7, 7, 7]]
        >>> lm.generate("The sky", do_sample=True, top_p=0.9, seed=0)  # doctest: +SKIP
        """
        chat, options = self._chat_arguments(
            tools, chat_template_kwargs, tool_choice, parallel_tool_calls, options
        )
        request, sampler, config = self._prepare(
            inputs, generation_config, options, sampler, processors, draft_model,
            chat, tool_choice,
        )  # fmt: skip
        if streamer is not None or config.max_time is not None:
            chunks = self._stream(
                request, streamer, config.max_time, stream_chunk_size, sampler
            )
            record = GenerationOutput.join(chunks)
        else:
            generate_function = self.make_generate_function(
                processors=request.processors, sampler=sampler
            )
            with backend.no_grad():
                outputs = generate_function(
                    request.program_inputs, **request.static_arguments
                )
            record = request.read(outputs, request.cache_length)
        return record if return_dict else request.format(record, strip_prompt)

    def stream(
        self,
        inputs,
        generation_config=None,
        *,
        sampler=None,
        processors=None,
        draft_model=None,
        stream_chunk_size=None,
        tools=None,
        chat_template_kwargs=None,
        tool_choice=None,
        parallel_tool_calls=True,
        **options,
    ):
        """Generate step by step: an iterator of `GenerationOutput` chunks.

        Takes the arguments of `generate` (a conversation's chunks hold the
        reply's text). Each chunk holds, per row, the
        tokens (and text, and requested per-step outputs) produced since the
        previous chunk and the finish reason of rows that ended. The chunks
        join (`GenerationOutput.join`) into what `generate(...,
        return_dict=True)` returns. Leaving the loop early stops generation.

        Examples:
        >>> for chunk in lm.stream([1, 2, 3], max_new_tokens=8):  # doctest: +SKIP
        ...     print(chunk.token_ids[0])
        """
        chat, options = self._chat_arguments(
            tools, chat_template_kwargs, tool_choice, parallel_tool_calls, options
        )
        request, sampler, config = self._prepare(
            inputs, generation_config, options, sampler, processors, draft_model,
            chat, tool_choice,
        )  # fmt: skip
        return self._stream(request, None, config.max_time, stream_chunk_size, sampler)

    def _chat_arguments(
        self, tools, chat_template_kwargs, tool_choice, parallel_tool_calls, options
    ):
        """A call's arguments for the chat template, and its options with the
        structured output a forced tool call needs."""
        if chat_template_kwargs is not None and not isinstance(
            chat_template_kwargs, dict
        ):
            raise TypeError(
                "`chat_template_kwargs` must be a dict. Received: "
                f"{chat_template_kwargs!r:.200}"
            )
        if not isinstance(parallel_tool_calls, bool):
            raise TypeError(
                "`parallel_tool_calls` must be a bool. Received: "
                f"{parallel_tool_calls!r:.200}"
            )
        chat = {"tools": tools, **(chat_template_kwargs or {})}
        if tools is None and tool_choice in (None, "none"):
            return chat, options
        if self.tokenizer is None or self.tokenizer.chat_template is None:
            raise ValueError("`tools` need a model with a chat template.")
        forced = tool_choice not in (None, "auto", "none")
        if options.get("response_format") is not None:
            if forced:
                raise ValueError(
                    "`tool_choice` forces the reply's form: give it or "
                    "`response_format`, not both."
                )
            return chat, options  # the format holds; calls are only parsed
        constraint = tool_call_parser.call_constraint(
            self.tokenizer.chat_template.source, tools, tool_choice, parallel_tool_calls
        )
        if constraint is None:
            return chat, options
        return chat, {**options, "response_format": constraint}

    def _prepare(
        self, inputs, generation_config, options, sampler, processors, draft, chat,
        tool_choice,
    ):  # fmt: skip
        """The host-side request, sampler and options of one call."""
        config, sampler, processors, seed = self._resolve(
            generation_config, options, sampler, processors, draft
        )
        request = GenerationRequest(
            self, inputs, config, sampler, processors, seed, chat, tool_choice
        )
        return request, sampler, config

    def _resolve(
        self,
        generation_config,
        options,
        sampler=None,
        processors=None,
        draft_model=None,
    ):
        """`(config, sampler, processors, seed)` of a call: see `generate`."""
        call = options_lib.call_options(generation_config, options)
        compiled = self.sampler if sampler is None else samplers.get(sampler)
        speculation = self.speculation
        if isinstance(compiled, SpeculativeSampler):
            speculation = compiled.speculation
            compiled = compiled.sampler
        if processors is None:
            processors = self.processors
        else:
            processors = processors_lib.get_list(processors)
        config, resolved, processors = options_lib.resolve(
            self.generation_config, call, compiled, processors
        )
        seed = call.seed
        if seed is None:
            seed = getattr(compiled, "seed", None)
        if seed is None:
            seed = config.seed
        speculation = speculation.override(
            checked_speculation(
                draft_model, call.num_speculative_tokens, call.prompt_lookup_ngram
            ),
            self.generation_config,
        )
        if speculation.enabled:
            resolved = speculation.sampler(resolved, self.backbone)
        for processor in processors:
            processor.check_vocabulary(self.backbone.vocabulary_size)
        return config, resolved, processors, seed

    def _stream(self, request, streamer, max_time, chunk_size, sampler):
        # Arguments are checked here, at the call, not at the first chunk.
        if chunk_size is None:
            chunk_size = self.stream_chunk_size
        chunk_size = check_count("stream_chunk_size", chunk_size)
        functions = self.make_stream_functions(request.processors, sampler)
        return generate_loop.stream_chunks(
            request, functions, sampler, streamer, max_time, chunk_size
        )

    @classmethod
    def from_pretrained(cls, path, dtype=None):
        """Load a model and its tokenizer from a local Hugging Face folder.

        The folder holds `config.json`, `*.safetensors` weights (one file or
        shards with an index) and, optionally, `tokenizer.json`,
        `tokenizer_config.json` and `generation_config.json`, which becomes
        `lm.generation_config` (the defaults of `generate`). Supported:
        GPT-2, Llama, Mistral, Qwen2, Qwen3 (and MoE), Gemma 1 to 3, Phi-3,
        OLMo 2 and Mixtral (`keras_gen.models.architectures`). Nothing is
        downloaded, and pickle (`.bin`) weights are refused. Without a
        tokenizer file the model still loads and takes token ids.

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
        """Write the model, tokenizer and `generation_config` as a Hugging
        Face folder.

        `transformers.AutoModelForCausalLM.from_pretrained(path)` loads it.
        """
        from keras_gen.models import checkpoint

        checkpoint.save_causal_lm(self, path)

    @classmethod
    def from_keras_hub(cls, model, dtype=None):
        """A keras-gen model of a keras-hub causal LM.

        Converts GPT-2, Llama 2 and 3, Mistral, Mixtral, Qwen 2, Qwen 3,
        Qwen 3 MoE, Gemma 1 to 3 (text) and Phi-3 models: the weights, the
        tokenizer (byte-pair or SentencePiece, adding the start token where
        keras-hub's preprocessor does) and the sampler the keras-hub model
        was compiled with. Logits equal keras-hub's (float32: within 1e-4).

        Args:
            model: a keras-hub `CausalLM` (or `Backbone`: no tokenizer),
                the path of a local keras-hub preset folder
                (`save_to_preset`) or of a `.keras` file.
            dtype: `None` (the keras-hub model's), `"float32"`,
                `"bfloat16"` or `"float16"`.

        Examples:
        >>> hub = keras_hub.models.GemmaCausalLM.from_preset(  # doctest: +SKIP
        ...     "gemma_2b_en")
        >>> lm = CausalLM.from_keras_hub(hub)  # doctest: +SKIP
        """
        from keras_gen.models import keras_hub_conversion

        lm = keras_hub_conversion.from_keras_hub(model, dtype=dtype)
        if not isinstance(lm, cls):
            raise ValueError(
                f"The keras-hub model converts to a {type(lm).__name__}, not "
                f"a {cls.__name__}. Use `CausalLM.from_keras_hub`."
            )
        return lm

    def to_keras_hub(self, path=None):
        """This model as a keras-hub `CausalLM` (with its preprocessor and
        sampler where keras-hub has them), saved as a keras-hub preset
        folder when `path` is given.

        keras-hub takes the families `from_keras_hub` reads, with the
        options keras-hub's backbones express (a ValueError names the
        rest); a Llama with a byte-level BPE tokenizer becomes a Llama 3.
        A SentencePiece family's preprocessor needs the tokenizer's
        SentencePiece model (`tokenizer.model`): without it, the keras-hub
        model takes token ids.
        """
        from keras_gen.models import keras_hub_conversion

        return keras_hub_conversion.to_keras_hub(
            self, None if path is None else os.fspath(path)
        )

    def save_lora(self, path):
        """Write the backbone's adapters as a PEFT folder
        (`adapter_config.json`, `adapter_model.safetensors`).

        `peft.PeftModel.from_pretrained(model, path)` loads it onto the
        transformers model of this checkpoint (it is the folder format of
        vLLM's LoRA serving too). `save_pretrained` writes the merged model
        instead.
        """
        from keras_gen.training import peft_adapter

        peft_adapter.save(self, os.fspath(path))

    def load_lora(self, path):
        """Read a PEFT LoRA folder (written by `save_lora` or by `peft`)
        onto the backbone: adapters on the projections it names, with its
        ranks and scales, everything else frozen. Returns how many
        projections it adapted."""
        from keras_gen.training import peft_adapter

        return peft_adapter.load(self, path)

    def compile_from_config(self, config):
        """Keras loading: compile with the saved optimizer and loss.

        Generation settings are not saved: the sampler is the default.
        """
        self.compile(**keras.saving.deserialize_keras_object(config))

    def save_assets(self, dir_path):
        """Keras saving: the tokenizer goes into the `.keras` file's assets."""
        tokenizer = self.tokenizer
        if tokenizer is None or not hasattr(tokenizer, "save_pretrained"):
            return
        tokenizer.save_pretrained(dir_path)
        # The special ids, where `Tokenizer.from_pretrained` reads them.
        ids = {
            "bos_token_id": getattr(tokenizer, "bos_token_id", None),
            "eos_token_id": list(getattr(tokenizer, "eos_token_ids", [])),
            "pad_token_id": getattr(tokenizer, "pad_token_id", None),
        }
        with open(os.path.join(dir_path, "config.json"), "w") as f:
            json.dump(ids, f)

    def load_assets(self, dir_path):
        if os.path.isfile(os.path.join(dir_path, TOKENIZER_FILE)):
            self.tokenizer = Tokenizer.from_pretrained(dir_path)

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "generation_config": self.generation_config.to_dict(),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        return cls(**config)
