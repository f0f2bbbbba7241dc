"""Load and save Hugging Face style model folders.

A folder holds `config.json`, the weights as `model.safetensors` (or shards
listed in `model.safetensors.index.json`), and optionally the tokenizer
(`tokenizer.json`, `tokenizer_config.json`) and `generation_config.json`.
This module reads the folder and picks a converter from the architecture
registry (`keras_gen.models.architectures`, filled by the family folders);
each converter maps one family's config and weight names onto a keras-gen
backbone and back.
Nothing is downloaded, and no pickle file is ever opened.
"""

import glob
import json
import os
import warnings

import keras
import ml_dtypes
import numpy as np
import safetensors
import safetensors.numpy

from keras_gen.generation.generation_config import GENERATION_CONFIG_FILE
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.models import architectures
from keras_gen.models import int4_checkpoint
from keras_gen.tokenizers.tokenizer import Tokenizer
from keras_gen.utils import progress
from keras_gen.utils.files import read_json_object

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
WEIGHTS_INDEX_FILE = "model.safetensors.index.json"
# Weight formats that unpickle (run code) or that keras-gen cannot read.
OTHER_WEIGHT_PATTERNS = (
    "*.bin",
    "*.pt",
    "*.pth",
    "*.ckpt",
    "*.pkl",
    "*.h5",
    "*.msgpack",
)

# Buffers that older checkpoints carry and no model reads: attention masks
# (GPT-2) and rotary frequencies (Llama).
BUFFER_SUFFIXES = (".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq")

# How many more weights than the folder holds numbers a config may
# describe (`_check_fits`).
CONFIG_SLACK = 4

DTYPES = ("float32", "bfloat16", "float16")
NUMPY_DTYPES = {
    "float32": np.float32,
    "bfloat16": ml_dtypes.bfloat16,
    "float16": np.float16,
}


def read_config(path):
    """The `config.json` of a model folder, with clear errors."""
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"`path` must be a local model folder; {path!r} does not exist "
            "or is not a folder. keras-gen never downloads models."
        )
    config_file = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(config_file):
        raise FileNotFoundError(
            f"No {CONFIG_FILE} in {path!r}: a Hugging Face model folder "
            "needs one to say which architecture it holds."
        )
    return read_json_object(config_file)


def architecture(config):
    """The supported architecture a config names, or a ValueError."""
    names = list(config.get("architectures") or [])
    for name in names:
        if name in architectures.ARCHITECTURES:
            return name
    model_type = config.get("model_type")
    if not names and model_type in architectures.MODEL_TYPES:
        return architectures.MODEL_TYPES[model_type]
    raise ValueError(
        f"Unsupported architecture {names or model_type!r}. keras-gen loads "
        f"{', '.join(sorted(architectures.ARCHITECTURES))}."
    )


def resolve_dtype(dtype, config):
    """`dtype`, or the checkpoint's own dtype when it is `None`."""
    if dtype is None:
        saved = config.get("dtype") or config.get("torch_dtype")
        return saved if saved in DTYPES else "float32"
    if dtype not in DTYPES:
        raise ValueError(
            f"`dtype` must be None or one of {list(DTYPES)}. Received: {dtype!r}"
        )
    return dtype


def _weight_files(path):
    """The safetensors file names of a folder: the index's shards, or all."""
    index_file = os.path.join(path, WEIGHTS_INDEX_FILE)
    if os.path.isfile(index_file):
        weight_map = read_json_object(index_file).get("weight_map")
        if not isinstance(weight_map, dict):
            raise ValueError(f"{index_file} has no 'weight_map'.")
        files = sorted(set(weight_map.values()))
        outside = [f for f in files if os.path.basename(f) != f]
        if outside:
            raise ValueError(
                f"{index_file} lists shards outside the folder: {outside[:3]}"
            )
        return files
    files = sorted(glob.glob(os.path.join(path, "*.safetensors")))
    if files:
        return [os.path.basename(f) for f in files]
    others = sorted(
        os.path.basename(f)
        for pattern in OTHER_WEIGHT_PATTERNS
        for f in glob.glob(os.path.join(path, pattern))
    )
    if others:
        raise ValueError(
            f"{path!r} holds weights as {others}, not safetensors. keras-gen "
            "loads only safetensors: pickle files (.bin, .pt) can run code "
            "when opened. Convert them once with transformers: "
            "`AutoModelForCausalLM.from_pretrained(path).save_pretrained(path)`."
        )
    raise FileNotFoundError(f"No *.safetensors weights in {path!r}.")


class WeightReader:
    """Reads named arrays from a folder's safetensors files, memory-mapped.

    Use as a context manager. `load(variable, name, transpose)` copies one
    weight into a Keras variable after checking its shape; the arrays stay
    in the files until then.
    """

    def __init__(self, path):
        self.path = os.fspath(path)
        self.names = {}
        # Names read so far: the rest are unused.
        self.read = set()
        for file_name in _weight_files(self.path):
            file_path = os.path.join(self.path, file_name)
            if not os.path.isfile(file_path):
                raise FileNotFoundError(
                    f"{WEIGHTS_INDEX_FILE} lists {file_name}, which is not in "
                    f"{self.path!r}."
                )
            for name in self._open(file_path).keys():
                if name in self.names:
                    raise ValueError(
                        f"Weight {name!r} is in both {self.names[name]} and "
                        f"{file_path}: a folder's safetensors files must not "
                        f"overlap (without {WEIGHTS_INDEX_FILE}, every "
                        "*.safetensors file in it is read)."
                    )
                self.names[name] = file_path

    def _open(self, file_path):
        try:
            return safetensors.safe_open(file_path, framework="numpy")
        except (safetensors.SafetensorError, OSError) as error:
            raise ValueError(
                f"{file_path} is not a readable safetensors file (truncated or "
                f"corrupt?): {error}"
            ) from error

    def num_elements(self):
        """How many numbers the files hold, read from their headers."""
        total = 0
        for file_path in set(self.names.values()):
            weights = self._open(file_path)
            for name in weights.keys():
                count = int(np.prod(weights.get_slice(name).get_shape()))
                # GPTQ and AWQ pack eight 4-bit weights in each int32.
                total += 8 * count if name.endswith(".qweight") else count
        return total

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        pass

    def __contains__(self, name):
        return name in self.names

    def get(self, name):
        self.read.add(name)
        if name not in self.names:
            raise ValueError(f"The checkpoint in {self.path!r} has no weight {name!r}.")
        file_path = self.names[name]
        # A file stays mapped only while one of its weights is read: mapped
        # pages count as the process's memory (a whole checkpoint's worth
        # at the end of a load otherwise).
        try:
            return self._open(file_path).get_tensor(name)
        except (safetensors.SafetensorError, OSError, ValueError) as error:
            raise ValueError(
                f"Could not read weight {name!r} from {file_path} (truncated "
                f"or corrupt?): {error}"
            ) from error

    def _read(self, name, shape, transpose, path):
        array = self.get(name)
        expected = tuple(shape)[::-1] if transpose else tuple(shape)
        if tuple(array.shape) != expected:
            raise ValueError(
                f"Weight {name!r} has shape {tuple(array.shape)}, but the model "
                f"built from {CONFIG_FILE} needs {expected} (for {path})."
            )
        where = f"Weight {name!r} in {self.names[name]}"
        if array.dtype.kind != "f" and array.dtype != ml_dtypes.bfloat16:
            raise ValueError(f"{where} holds {array.dtype} values, not floats.")
        # A float64 sum (summed in small buffers: no copy of the weight) is
        # finite exactly when every value is.
        if not np.isfinite(array.sum(dtype=np.float64)):
            raise ValueError(f"{where} holds non-finite values (NaN or inf).")
        return np.transpose(array) if transpose else array

    def load(self, variable, name, transpose=False):
        """Copy weight `name` (transposed for a `Dense` kernel) into `variable`.

        `name` may be a tuple of names: their tensors, stacked on a new
        first axis, fill the variable (a layer's experts).
        """
        if isinstance(name, tuple):
            shape = tuple(variable.shape)[1:]
            if len(name) != variable.shape[0]:
                raise ValueError(f"{variable.path} stacks {variable.shape[0]} weights.")
            array = np.stack(
                [self._read(n, shape, transpose, variable.path) for n in name]
            )
        else:
            array = self._read(name, variable.shape, transpose, variable.path)
        dtype = keras.backend.standardize_dtype(variable.dtype)
        # Every backend casts float32 numpy to bfloat16 itself; not all of
        # them accept ml_dtypes' bfloat16 arrays.
        target = np.float32 if dtype == "bfloat16" else NUMPY_DTYPES.get(dtype, dtype)
        variable.assign(np.asarray(array).astype(target, copy=False))

    def load_all(self, weight_map):
        """Load every `(name, variable, transpose)` of a converter's map,
        showing the progress (`keras_gen.utils.progress`)."""
        description = f"Loading {os.path.basename(os.path.normpath(self.path))}"
        for name, variable, transpose in progress.track(weight_map, description):
            self.load(variable, name, transpose)


class ArrayReader(WeightReader):
    """A `WeightReader` over arrays in memory: `{name: numpy array}` in
    Hugging Face's names (a model converted from another library).

    Args:
        weights: the arrays.
        origin: str, what they come from, for messages.
    """

    def __init__(self, weights, origin):
        self.path = origin
        self.weights = weights
        self.names = {name: origin for name in weights}
        self.read = set()

    def num_elements(self):
        return sum(int(np.size(array)) for array in self.weights.values())

    def get(self, name):
        self.read.add(name)
        if name not in self.weights:
            raise ValueError(f"{self.path} has no weight {name!r}.")
        return self.weights[name]


def load_tokenizer(path):
    """The folder's tokenizer, or `None` (with a warning) when it has none."""
    try:
        return Tokenizer.from_pretrained(path)
    except FileNotFoundError as error:
        warnings.warn(
            f"{error} The model loads without a tokenizer: `generate` takes "
            "token ids, not text.",
            stacklevel=4,
        )
        return None


def load_causal_lm(path, dtype=None, causal_lm_class=None):
    """Build a `CausalLM` from a local Hugging Face model folder.

    Args:
        path: the folder.
        dtype: `None` (the checkpoint's dtype, float32 when it names none),
            `"float32"`, `"bfloat16"` or `"float16"`.
        causal_lm_class: `None`, or the class `from_pretrained` was called
            on: the folder's architecture must be that class or a subclass.
    """
    config = read_config(path)
    with WeightReader(path) as reader:
        _check_fits(config, reader)
        return build_causal_lm(
            config,
            reader,
            load_tokenizer(path),
            GenerationConfig.from_pretrained(path),
            dtype=dtype,
            causal_lm_class=causal_lm_class,
        )


def build_causal_lm(
    config, reader, tokenizer, generation_config, dtype=None, causal_lm_class=None
):
    """A `CausalLM` from a Hugging Face config and a reader of its weights
    (a folder's `WeightReader`, or an `ArrayReader`)."""
    name = architecture(config)
    converter = architectures.ARCHITECTURES[name]
    if causal_lm_class is not None and not issubclass(
        converter.CAUSAL_LM_CLASS, causal_lm_class
    ):
        raise ValueError(
            f"{reader.path!r} holds a {name}, which loads as "
            f"{converter.CAUSAL_LM_CLASS.__name__}, not "
            f"{causal_lm_class.__name__}. Use `CausalLM.from_pretrained`."
        )
    dtype = resolve_dtype(dtype, config)
    try:
        backbone = converter.backbone_from_config(config, name, dtype=dtype)
    except (TypeError, ValueError) as error:  # a bad entry: name the source
        raise type(error)(f"{CONFIG_FILE} in {reader.path!r}: {error}") from None
    if int4_checkpoint.scheme(config) is not None:
        if hasattr(converter, "load_weights"):
            raise ValueError(
                f"keras-gen reads GPTQ and AWQ checkpoints of the decoder "
                f"families, not of {name}."
            )
        int4_checkpoint.load_weights(
            backbone, converter.weight_map(backbone), reader, config
        )
    elif hasattr(converter, "load_weights"):
        converter.load_weights(backbone, reader)
    else:
        reader.load_all(converter.weight_map(backbone))
    _warn_unused(reader, reader.path)
    vocabulary_size = backbone.vocabulary_size
    if tokenizer is not None:
        tokenizer.eos_token_ids = _in_vocabulary(
            tokenizer.eos_token_ids, vocabulary_size, "The tokenizer's end token"
        )
    if generation_config.eos_token_id is not None:
        generation_config = generation_config.replace(
            eos_token_id=_in_vocabulary(
                generation_config.eos_token_id,
                vocabulary_size,
                f"{GENERATION_CONFIG_FILE}'s `eos_token_id`",
            )
            or None
        )
    return converter.CAUSAL_LM_CLASS(
        backbone, tokenizer=tokenizer, generation_config=generation_config
    )


def _minimum_weights(config):
    """A lower bound on the weights of any model `config` describes: the
    embedding table, and per block the queries' and outputs' projections
    and two hidden x intermediate matrices."""

    def first(*keys, default):
        for key in keys:
            value = config.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
        return default

    hidden = first("hidden_size", "n_embd", default=1)
    intermediate = first("intermediate_size", "n_inner", default=hidden)
    layers = first("num_hidden_layers", "n_layer", default=1)
    heads = first("num_attention_heads", "n_head", default=1)
    attention = heads * first("head_dim", default=max(hidden // heads, 1))
    block = 2 * hidden * (intermediate + attention)
    return first("vocab_size", default=0) * hidden + layers * block


def _check_fits(config, reader):
    """Refuse a config that describes a model far larger than the weights
    beside it, before anything is built (`"num_hidden_layers": 10**6`
    would take hours and all memory to build, only to fail on the first
    weight's shape). Packed (4-bit) weights hold fewer numbers than the
    model has weights, hence the slack."""
    needed, held = _minimum_weights(config), reader.num_elements()
    if needed > CONFIG_SLACK * held:
        raise ValueError(
            f"{CONFIG_FILE} in {reader.path!r} describes a model of at least "
            f"{needed:,} weights (its vocabulary, hidden, intermediate and "
            f"layer sizes), but the folder's safetensors files hold {held:,} "
            f"numbers: {CONFIG_FILE} does not describe these weights."
        )


def _in_vocabulary(token_ids, vocabulary_size, what):
    """The ids inside the vocabulary; a warning names those left out."""
    outside = [t for t in token_ids if not 0 <= t < vocabulary_size]
    if outside:
        warnings.warn(
            f"{what} {outside} is outside the model's vocabulary of "
            f"{vocabulary_size} tokens, so generation does not stop on it.",
            stacklevel=5,
        )
    return [t for t in token_ids if 0 <= t < vocabulary_size]


def _warn_unused(reader, path):
    unused = sorted(
        name
        for name in set(reader.names) - reader.read
        if not name.endswith(BUFFER_SUFFIXES)
    )
    if unused:
        warnings.warn(
            f"{len(unused)} tensors in {path!r} are not used by the model its "
            f"{CONFIG_FILE} describes (fewer layers than the weights?): "
            f"{unused[:5]}{' ...' if len(unused) > 5 else ''}",
            stacklevel=5,
        )


def _to_numpy(variable):
    dtype = keras.backend.standardize_dtype(variable.dtype)
    array = keras.ops.convert_to_numpy(variable.value)
    return np.asarray(array).astype(NUMPY_DTYPES.get(dtype, dtype), copy=False)


def _float_weights(backbone):
    """`{variable path: float32 array}` for the weights of `backbone` that
    are not stored as they are written: int8 ones and adapted kernels.

    `quantize("int8")` keeps int8 values and one scale per output channel
    (per row of an embedding); a Hugging Face folder holds float weights,
    so they are written as `values / scale`. `quantize("int4")` kernels are
    written dequantized too (`Dense.dequantized_int4_kernel`). Other modes
    are refused. A kernel with a LoRA adapter is written merged
    (`W + (alpha / r) A B`).
    """
    from keras_gen.training import lora

    weights = {}
    for layer in backbone._flatten_layers():
        mode = getattr(layer, "quantization_mode", None)
        adapted = getattr(layer, "lora_enabled", False)
        if mode is None and not adapted:
            continue
        if mode not in (None, "int8", "int4"):
            raise ValueError(
                f"`save_pretrained` writes float, int8 or int4 models; "
                f"{layer.path} is quantized as {mode!r}. Save with "
                '`lm.save("model.keras")` instead.'
            )
        if mode == "int4":
            variable = layer._kernel
            values = layer.dequantized_int4_kernel("float32")
            values = keras.ops.convert_to_numpy(values)
            weights[variable.path] = values + lora.delta(layer) if adapted else values
            continue
        if isinstance(layer, keras.layers.Embedding):
            variable = layer._embeddings
            scale = layer.embeddings_scale[:, None] if mode else 1.0
        else:
            variable = layer._kernel
            scale = layer.kernel_scale if mode else 1.0
        values = keras.ops.convert_to_numpy(variable.value).astype("float32")
        values = values / keras.ops.convert_to_numpy(scale)
        weights[variable.path] = values + lora.delta(layer) if adapted else values
    return weights


def _remove_old_shards(path):
    # A sharded checkpoint saved here before would win over the new single
    # file when the folder is loaded again.
    index_file = os.path.join(path, WEIGHTS_INDEX_FILE)
    if not os.path.isfile(index_file):
        return
    for file_name in set(read_json_object(index_file).get("weight_map", {}).values()):
        shard = os.path.join(path, os.path.basename(file_name))
        if os.path.isfile(shard):
            os.remove(shard)
    os.remove(index_file)


def to_hugging_face(causal_lm):
    """`(config, special_ids, weights)`: the `config.json` contents, the
    tokenizer's special ids, and `{name: numpy array}` in Hugging Face's
    names, of a `CausalLM`."""
    backbone = causal_lm.backbone
    converter = architectures.converter_for_backbone(backbone)
    config = converter.config_from_backbone(backbone)
    special_ids = {}
    tokenizer = causal_lm.tokenizer
    if tokenizer is not None:
        for key, value in (
            ("bos_token_id", getattr(tokenizer, "bos_token_id", None)),
            ("eos_token_id", getattr(tokenizer, "eos_token_ids", None) or None),
            ("pad_token_id", getattr(tokenizer, "pad_token_id", None)),
        ):
            if isinstance(value, list) and len(value) == 1:
                value = value[0]
            config[key] = special_ids[key] = value
    config["dtype"] = keras.backend.standardize_dtype(backbone.variable_dtype)
    converted = _float_weights(backbone)
    weights = {}
    for name, variable, transpose in converter.weight_map(backbone):
        array = converted.get(variable.path)
        if array is None:
            array = _to_numpy(variable)
        else:
            array = array.astype(NUMPY_DTYPES.get(config["dtype"], np.float32))
        names, arrays = (
            (name, list(array)) if isinstance(name, tuple) else ((name,), [array])
        )
        for one_name, one_array in zip(names, arrays):
            one_array = np.swapaxes(one_array, -1, -2) if transpose else one_array
            weights[one_name] = np.ascontiguousarray(one_array)
    return config, special_ids, weights


def save_causal_lm(causal_lm, path):
    """Write a `CausalLM` as a Hugging Face model folder (safetensors)."""
    path = os.fspath(path)
    config, special_ids, weights = to_hugging_face(causal_lm)
    os.makedirs(path, exist_ok=True)
    _remove_old_shards(path)
    with open(os.path.join(path, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2)
    causal_lm.generation_config.save_pretrained(path, extra=special_ids)
    safetensors.numpy.save_file(
        weights, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"}
    )
    tokenizer = causal_lm.tokenizer
    if tokenizer is not None and hasattr(tokenizer, "save_pretrained"):
        tokenizer.save_pretrained(path)
