"""The causal language model task: compile once, generate many times."""

import secrets

import keras
import numpy as np
from keras import ops

from keras_gen import backend
from keras_gen import samplers
from keras_gen.models import prompts as prompts_lib

# Stop ids enter the program as a fixed-size tensor padded with -1, so a
# different set of stop ids (up to this many) does not recompile.
STOP_TOKEN_SLOTS = 8
MIN_CACHE_LENGTH = 32
MIN_PREFILL_LENGTH = 16


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
        self.compile()

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
        jit_compile=True,
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
            jit_compile: bool. `False` runs generation eagerly (debugging).
        """
        if optimizer == "auto":
            optimizer = keras.optimizers.Adam(2e-5)
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
        self.sampler = samplers.get(sampler)
        self.generate_jit_compile = jit_compile
        self.generate_function = None

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

    def generate_step(self, inputs, prefill_length):
        """Generate for one padded batch; the body of the compiled program.

        Args:
            inputs: a dict of tensors. `token_ids` and `padding_mask`,
                `(batch, cache_length)`: prompts aligned left. `end`,
                `(batch,)`: where each row stops at the latest.
                `stop_token_ids` `(slots,)` (-1 for unused slots), `seed`
                `(2,)`, and `sampler`: the sampler's tunable numbers.
            prefill_length: int, how many leading positions hold prompt
                tokens; the cache is seeded from these only.

        Returns:
            `(batch, cache_length)` token ids.
        """
        token_ids, mask = inputs["token_ids"], inputs["padding_mask"]
        hidden_states, state = self.backbone.build_state(
            token_ids[:, :prefill_length],
            mask[:, :prefill_length],
            cache_length=ops.shape(token_ids)[1],
        )
        # Rows are aligned left: the loop starts at the shortest prompt and
        # keeps prompt tokens wherever a longer row still has them.
        index = ops.min(ops.sum(ops.cast(mask, "int32"), axis=1))
        sampler = self.sampler
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
            )
            return sampler.finish(sampler.run(self.next, loop))

    def make_generate_function(self):
        """Build (once) and return the compiled generate function."""
        if self.generate_function is None:
            self.generate_function = backend.compile_function(
                self.generate_step,
                self.variables,
                jit_compile=self.generate_jit_compile,
                static_argnames=("prefill_length",),
            )
        return self.generate_function

    def _stop_token_ids(self, stop_token_ids):
        if isinstance(stop_token_ids, str) and stop_token_ids == "auto":
            stop_token_ids = getattr(self.tokenizer, "eos_token_ids", None)
        if stop_token_ids is None:
            return []
        if isinstance(stop_token_ids, (int, np.integer)):
            stop_token_ids = [stop_token_ids]
        stop_token_ids = list(stop_token_ids)
        vocabulary_size = self.backbone.vocabulary_size
        for token in stop_token_ids:
            if not isinstance(token, (int, np.integer)) or not (
                0 <= token < vocabulary_size
            ):
                raise ValueError(
                    "`stop_token_ids` must be None, 'auto' or token ids in "
                    f"[0, {vocabulary_size}). Received: {stop_token_ids}"
                )
        if len(stop_token_ids) > STOP_TOKEN_SLOTS:
            raise ValueError(
                f"`stop_token_ids` takes at most {STOP_TOKEN_SLOTS} ids. "
                f"Received {len(stop_token_ids)}."
            )
        return [int(t) for t in stop_token_ids]

    def _seed(self, seed):
        seed = self.sampler.seed if seed is None else seed
        if seed is None:
            seed = secrets.randbits(31)
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"`seed` must be an int or None. Received: {seed!r}")
        return [int(seed) % (1 << 31), 0]

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
            return_dict: bool. `True` answers with a dict: `"sequences"`
                (what `generate` returns otherwise) and, when the sampler
                scores its sequences (beam search), `"sequence_scores"` in
                the same layout.

        With a sampler that returns `n > 1` sequences per prompt (beam
        search with `num_return_sequences=n`), each prompt's answer becomes
        a list of `n`, best first; a dict answer stays flat, prompt `b`'s
        sequences at rows `b * n` to `b * n + n - 1`.

        Examples:
        >>> lm.generate([[1, 2, 3], [4, 5]], max_new_tokens=4)  # doctest: +SKIP
        [[1, 2, 3, 9, 9, 9, 9], [4, 5, 7, 7, 7, 7]]
        """
        prompts, form, width = prompts_lib.read_prompts(inputs, self.tokenizer)
        backbone = self.backbone
        prompts_lib.check_prompts(prompts, backbone.vocabulary_size)
        limit = backbone.max_sequence_length
        ends = prompts_lib.row_ends(
            prompts, max_length, max_new_tokens, width, limit
        )
        stop_token_ids = self._stop_token_ids(stop_token_ids)
        sampler_parameters = self.sampler.get_parameters()

        cache_length = prompts_lib.bucket(max(ends), MIN_CACHE_LENGTH, limit)
        prefill_length = min(
            cache_length,
            prompts_lib.bucket(max(map(len, prompts)), MIN_PREFILL_LENGTH),
        )
        token_ids, mask = prompts_lib.pack(prompts, cache_length)
        stop_slots = stop_token_ids + [-1] * (STOP_TOKEN_SLOTS - len(stop_token_ids))
        program_inputs = {
            "token_ids": ops.convert_to_tensor(token_ids, "int32"),
            "padding_mask": ops.convert_to_tensor(mask, "bool"),
            "end": ops.convert_to_tensor(np.asarray(ends, "int32")),
            "stop_token_ids": ops.convert_to_tensor(stop_slots, "int32"),
            "seed": ops.convert_to_tensor(self._seed(seed), "int32"),
            "sampler": {
                name: ops.convert_to_tensor(value, "float32")
                for name, value in sampler_parameters.items()
            },
        }
        generate_function = self.make_generate_function()
        with backend.no_grad():
            outputs = generate_function(
                program_inputs, prefill_length=prefill_length
            )
        # A sampler's `finish` gives token ids, or a dict of them and their
        # `sequence_scores`; with `n` rows per prompt (beam search).
        if not isinstance(outputs, dict):
            outputs = {"token_ids": outputs}
        token_ids = ops.convert_to_numpy(outputs["token_ids"])
        n = len(token_ids) // len(prompts)
        prompts = [prompt for prompt in prompts for _ in range(n)]
        ends = [end for end in ends for _ in range(n)]
        rows = prompts_lib.cut(token_ids, prompts, ends, stop_token_ids)
        sequences = prompts_lib.format_outputs(
            rows, prompts, prompts_lib.plural(form), width or 0, strip_prompt,
            self.tokenizer, stop_token_ids,
        )
        sequences = prompts_lib.per_prompt(sequences, form, n)
        if not return_dict:
            return sequences
        result = {"sequences": sequences}
        if "sequence_scores" in outputs:
            scores = ops.convert_to_numpy(outputs["sequence_scores"])
            result["sequence_scores"] = prompts_lib.per_prompt(scores, form, n)
        return result

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
