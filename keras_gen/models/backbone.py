"""The base class of every architecture's backbone."""

import keras
from keras import ops

from keras_gen import backend
from keras_gen import layouts
from keras_gen.layers.cached_attention import CacheView


class Backbone(keras.Model):
    """A decoder-only transformer that `CausalLM` can generate with.

    A backbone maps token ids to hidden states (`call`) and hidden states to
    vocabulary logits (`compute_logits`). For generation it has two methods,
    from which `CausalLM` builds its one-step `next` function once for every
    architecture:

    - `build_state(token_ids, padding_mask, cache_length)`: run the prompt,
      allocate the fixed-shape key/value cache of `cache_length` positions
      and seed it with the prompt. Returns `(hidden_states, state)`.
    - `call_with_state(token_ids, state, index)`: run new tokens from
      position `index` (a scalar tensor, or a `(batch,)` tensor of one
      position per row) against the cache. Returns
      `(logits, hidden_states, state)`. `extend_row` does the same for
      one row of a larger cache, without the logits: the serving engine's
      prompt chunks.

    `state` is a tuple with one `(key_cache, value_cache)` pair per layer,
    each `(batch, num_key_value_heads, cache_length, head_dim)`: updated in
    place, never grown.

    A subclass builds `self.transformer_layers` (blocks called as
    `block(x, cache=, index=, seed_cache=)` returning `(x, cache)`) and
    implements `embed`, `final_norm` and `compute_logits`. It sets
    `vocabulary_size`, `num_layers`, `num_key_value_heads`, `head_dim` and
    `max_sequence_length` (`None` when positions are unbounded).
    """

    max_sequence_length = None

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        # Bumped whenever weights are added or removed (adapters): compiled
        # generation programs read a fixed set of variables.
        self.weights_structure = 0
        # Paths of the weights `enable_lora` froze (and `merge_lora` thaws).
        self._lora_frozen = ()

    def build_weights(self):
        """Build every weight. Under a `keras.distribution.ModelParallel`
        each weight takes its layout map rule fitted to its shape: a
        dimension is split only where the mesh axis divides it (see
        `layouts.fitted_layouts`)."""
        with layouts.fitted_layouts(type(self).__name__):
            self.build(None)

    def default_lora_targets(self):
        """The projections `enable_lora` adapts by default: the queries and
        values, as PEFT does."""
        return ("q_proj", "v_proj")

    def enable_lora(self, rank, target_modules=None, lora_alpha=None):
        """Put low-rank adapters on projections and freeze everything else.

        Each targeted projection `W` computes with `W + (lora_alpha / rank)
        * A @ B`, `A` and `B` trainable (`B` starts at 0: the model is
        unchanged until it trains). Embeddings, norms, biases and kernels
        are frozen, so `fit` trains `rank * (in + out)` numbers per
        projection. Generation uses the adapted weights; the first
        `generate` after this compiles again. Call before the optimizer is
        built (the first `fit`), or compile a new optimizer after.

        Args:
            rank: int >= 1.
            target_modules: `None` (the queries and values: `q_proj` and
                `v_proj`; `qkv_proj` or `c_attn` where they are fused),
                `"all-linear"` (every attention and MLP projection), or a
                list of projection names as in the Hugging Face checkpoints
                (`q_proj`, `k_proj`, `v_proj`, `o_proj`, `gate_proj`,
                `up_proj`, `down_proj`, `qkv_proj`, `gate_up_proj`; GPT-2's
                `c_attn`, `c_proj`, `c_fc`, `mlp_c_proj`). Experts take none.
            lora_alpha: `None` (equal to `rank`: a scale of 1) or a number.

        Examples:
        >>> lm.backbone.enable_lora(8, target_modules="all-linear")  # doctest: +SKIP
        >>> lm.fit(texts, epochs=2)  # doctest: +SKIP
        """
        from keras_gen.training import lora

        lora.enable(self, lora.targets(self, target_modules), rank, lora_alpha)

    def merge_lora(self):
        """Fold the adapters into the kernels (generation then costs what
        it cost before them) and unfreeze what `enable_lora` froze.
        Returns the number of projections merged."""
        from keras_gen.training import lora

        return lora.merge(self)

    def get_config(self):
        config = super().get_config()
        # A quantized model lists its quantized layers' policies: loading
        # builds those layers with int8 variables (`.keras` saving).
        policy = self.dtype_policy
        quantized = [
            layer
            for layer in self._flatten_layers()
            if layer.quantization_mode is not None
        ]
        if quantized and not isinstance(policy, keras.dtype_policies.DTypePolicyMap):
            policy = keras.dtype_policies.DTypePolicyMap(default_policy=policy)
            for layer in quantized:
                policy[layer.path] = layer.dtype_policy
        config["dtype"] = keras.dtype_policies.serialize(policy)
        # The layers' config says whether activations are quantized too
        # (`CausalLM.quantize(..., quantize_activations=False)` keeps them
        # float).
        setting = (
            getattr(quantized[0], "quantization_config", None) if quantized else None
        )
        if setting is not None:
            config["quantization_config"] = keras.saving.serialize_keras_object(setting)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        setting = config.pop("quantization_config", None)
        backbone = cls(**config)
        if setting is not None:
            setting = keras.saving.deserialize_keras_object(setting)
            for layer in backbone._flatten_layers():
                if layer.quantization_mode:
                    # An int8 embedding used as the output head reads it too.
                    layer.quantization_config = setting
                    if hasattr(layer, "inputs_quantizer"):
                        layer.inputs_quantizer = setting.activation_quantizer
        return backbone

    @classmethod
    def get_layout_map(
        cls,
        device_mesh,
        model_parallel_dim_name="model",
        data_parallel_dim_name="batch",
    ):
        """A `keras.distribution.LayoutMap` that shards this architecture.

        Give it to `keras.distribution.ModelParallel` and create the model
        under that distribution: each weight is then split over the
        `model_parallel_dim_name` axis of `device_mesh` (attention by heads,
        the MLP column- then row-parallel, embeddings and output head) and
        whole on every replica of the `data_parallel_dim_name` axis. The map
        also holds the layout of the key/value cache, which `generate` lays
        out inside its compiled program: batch over the data axis, heads
        over the model axis.

        Args:
            device_mesh: a `keras.distribution.DeviceMesh`.
            model_parallel_dim_name: str, the mesh axis that splits weights.
            data_parallel_dim_name: str, the mesh axis that splits the batch.

        Examples:
        >>> mesh = keras.distribution.DeviceMesh(
        ...     (2, 4), ["batch", "model"], keras.distribution.list_devices()
        ... )  # doctest: +SKIP
        >>> layout_map = GPT2Backbone.get_layout_map(mesh)  # doctest: +SKIP
        >>> keras.distribution.set_distribution(
        ...     keras.distribution.ModelParallel(
        ...         layout_map=layout_map, batch_dim_name="batch"
        ...     )
        ... )  # doctest: +SKIP
        """
        raise NotImplementedError(
            f"{cls.__name__} has no layout map; see "
            "`GPT2Backbone.get_layout_map` for one."
        )

    def embed(self, token_ids, index, training=False):
        """`(batch, length)` token ids at positions from `index` to vectors.

        `index` is a scalar or a `(batch,)` tensor (one start per row).
        """
        raise NotImplementedError

    def final_norm(self, x):
        raise NotImplementedError

    def compute_logits(self, hidden_states):
        """`(..., hidden_dim)` to float32 `(..., vocabulary_size)` logits."""
        raise NotImplementedError

    def tied_logits(self, embedding, hidden_states):
        """Logits from an input `keras.layers.Embedding` used as output head.

        Works on float and on int8-quantized embeddings (`quantize("int8")`
        keeps int8 rows and one scale per row): the int8 table is
        multiplied as the quantized `Dense` kernels are, with int8 rows of
        activations unless the model was quantized weight-only.
        """
        if embedding.quantization_mode == "int8":
            config = getattr(embedding, "quantization_config", None)
            logits = backend.int8_matmul(
                hidden_states,
                embedding._embeddings,
                embedding.embeddings_scale,
                quantize_inputs=getattr(config, "activation_quantizer", None)
                is not None,
                transpose=True,
            )
            return ops.cast(logits, "float32")
        kernel = ops.cast(embedding.embeddings, hidden_states.dtype)
        logits = backend.matmul_transposed(hidden_states, kernel)
        return ops.cast(logits, "float32")

    def call(self, token_ids, padding_mask=None, training=False):
        """Hidden states of whole sequences, with no cache (training).

        `padding_mask` `(batch, length)` is 0 on padding, on either side: a
        row's first real token is at position 0 and padding is never
        attended to, so a padded row computes what it computes alone.
        """
        index = 0
        if padding_mask is not None:
            mask = ops.cast(padding_mask, "int32")
            index = -ops.cast(ops.argmax(mask, axis=1), "int32")
        x = self.embed(token_ids, index, training=training)
        for block in self.transformer_layers:
            x, _ = block(x, index=index, padding_mask=padding_mask, training=training)
        return self.final_norm(x)

    def build_state(self, token_ids, padding_mask=None, cache_length=None):
        batch, length = ops.shape(token_ids)
        cache_shape = (
            batch,
            self.num_key_value_heads,
            cache_length or length,
            self.head_dim,
        )
        # Under a `keras.distribution` rows split over the data axis; the
        # cache is laid out by `CachedAttention` (see `layouts`).
        token_ids = layouts.shard_batch(token_ids)
        x = self.embed(token_ids, 0)
        state = []
        for block in self.transformer_layers:
            empty = (
                ops.zeros(cache_shape, dtype=self.compute_dtype),
                ops.zeros(cache_shape, dtype=self.compute_dtype),
            )
            x, cache = block(x, cache=empty, index=0, seed_cache=True)
            state.append(cache)
        return self.final_norm(x), tuple(state)

    def grow_state(self, state, cache_length):
        """`state` with every cache padded to `cache_length` positions."""

        def grow(cache):
            extra = cache_length - ops.shape(cache)[2]
            return ops.pad(cache, [[0, 0], [0, 0], [0, extra], [0, 0]])

        return keras.tree.map_structure(grow, state)

    def call_with_state(self, token_ids, state, index):
        x, state = self._run_with_state(token_ids, state, index)
        hidden_states = self.final_norm(x)
        logits = self.compute_logits(hidden_states)
        return logits, hidden_states, state

    def extend_row(self, token_ids, state, row, index, cache_length):
        """`state` with the keys and values of the `(1, length)`
        `token_ids` written into its row `row` from position `index`, each
        token attending to that row's positions before it, all within its
        first `cache_length` (a prompt prefilled in chunks beside other
        rows, or after a reused prefix); no logits."""
        x = self.embed(layouts.shard_batch(token_ids), index)
        positions = ops.arange(cache_length, dtype="int32")
        new_state = []
        for block, (keys, values) in zip(self.transformer_layers, state):
            view = CacheView(keys, values, row, positions)
            x, cache = backend.call_block(block, x, view, index)
            new_state.append((cache.keys, cache.values))
        return tuple(new_state)

    def _run_with_state(self, token_ids, state, index):
        token_ids = layouts.shard_batch(token_ids)
        x = self.embed(token_ids, index)
        new_state = []
        for block, cache in zip(self.transformer_layers, state):
            x, cache = backend.call_block(block, x, cache, index)
            new_state.append(cache)
        return x, tuple(new_state)
