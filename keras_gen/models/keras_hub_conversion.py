"""keras-hub causal LMs to keras-gen, and keras-gen models back to keras-hub.

A keras-hub model converts through the form keras-gen reads from Hugging
Face folders: its backbone's config and weights are respelled in
transformers' terms (`keras_hub_families` has one table per family), and
the family converters of `keras_gen.models` build the model from them
exactly as `from_pretrained` does, with the same checks. Back, the model's
Hugging Face form (`checkpoint.to_hugging_face`) fills a new keras-hub
backbone through the same tables. The tokenizer (keras-hub's byte-pair or
SentencePiece vocabulary) and the compiled sampler come along both ways.
Nothing is downloaded: keras-hub presets load from local folders only.
"""

import json
import os
import re
import warnings

import keras
import numpy as np
import tokenizers

from keras_gen import samplers
from keras_gen.generation.generation_config import GenerationConfig
from keras_gen.models import checkpoint
from keras_gen.models.keras_hub_families import BACKBONES
from keras_gen.models.keras_hub_families import FAMILIES
from keras_gen.models.keras_hub_families import Part
from keras_gen.models.keras_hub_families import Split
from keras_gen.tokenizers.sentencepiece_model import tokenizer_from_sentencepiece
from keras_gen.tokenizers.tokenizer import Tokenizer

# The samplers both libraries have (by the same class names) and the
# settings they share.
SAMPLERS = {
    "GreedySampler": (),
    "RandomSampler": ("temperature", "seed"),
    "TopKSampler": ("k", "temperature", "seed"),
    "TopPSampler": ("p", "k", "temperature", "seed"),
    "BeamSampler": ("num_beams", "temperature"),
    "ContrastiveSampler": ("k", "alpha", "temperature"),
}


def _keras_hub():
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(
            "Converting keras-hub models needs keras-hub: pip install keras-hub"
        ) from error
    return keras_hub


def _load(model):
    """A keras-hub task or backbone from an object, a preset folder or a
    `.keras` file."""
    keras_hub = _keras_hub()
    if isinstance(model, (keras_hub.models.CausalLM, keras_hub.models.Backbone)):
        return model
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(
            "`model` must be a keras-hub `CausalLM` or `Backbone`, a local "
            "keras-hub preset folder or a `.keras` file. Received: "
            f"{type(model).__name__}"
        )
    path = os.fspath(model)
    if os.path.isfile(path) and path.endswith(".keras"):
        return keras.saving.load_model(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"{path!r} is not a local keras-hub preset folder or .keras file. "
            "keras-gen never downloads models: load a preset with "
            "`keras_hub.models.CausalLM.from_preset(...)` and pass the model."
        )
    return keras_hub.models.CausalLM.from_preset(path)


def _family(backbone):
    name = type(backbone).__name__
    if name not in FAMILIES:
        raise ValueError(
            f"keras-gen converts keras-hub's {sorted(FAMILIES)}; this model's "
            f"backbone is a {name}."
        )
    return FAMILIES[name]


def _rules(family, config):
    """`[(regex, target, layout)]` of a family's weight table."""
    rules = []
    for template, (target, layout) in family.weights(config).items():
        pattern = re.escape(template).replace(re.escape("{i}"), r"(?P<i>\d+)")
        pattern = pattern.replace(re.escape("{n}"), r"(?:_\d+)?")
        rules.append((re.compile(rf"(?:^|/){pattern}$"), target, layout))
    return rules


def _named(target, layer):
    """The target with its layer index filled in (`{e}` stays)."""

    def fill(name):
        return name.replace("{i}", layer) if layer is not None else name

    if isinstance(target, Part):
        return Part(fill(target.name), target.index)
    if isinstance(target, Split):
        return Split(tuple(fill(n) for n in target.names))
    return fill(target)


def _matched(backbone, rules):
    """`[(variable, target, layout)]` for every weight of a keras-hub
    backbone, or a ValueError naming those no rule matches."""
    matched, unknown = [], []
    for variable in backbone.weights:
        for regex, target, layout in rules:
            found = regex.search(variable.path)
            if found:
                layer = found.groupdict().get("i")
                matched.append((variable, _named(target, layer), layout))
                break
        else:
            unknown.append(variable.path)
    if unknown:
        raise ValueError(
            f"keras-gen cannot convert these weights of the {type(backbone).__name__}"
            f" (a changed model?): {unknown[:5]}"
        )
    return matched


def _experts(weights):
    """Split each `{e}` array (experts stacked first) into one per expert."""
    for name in [n for n in weights if "{e}" in n]:
        for index, array in enumerate(weights.pop(name)):
            weights[name.replace("{e}", str(index))] = array
    return weights


def hugging_face_weights(backbone, config):
    """`{Hugging Face name: array}` of a keras-hub backbone's weights."""
    family = _family(backbone)
    weights, parts = {}, {}
    for variable, target, layout in _matched(backbone, _rules(family, config)):
        array = layout.to_hf(np.asarray(keras.ops.convert_to_numpy(variable)))
        if isinstance(target, Part):
            parts.setdefault(target.name, {})[target.index] = (array, layout)
        elif isinstance(target, Split):
            chunks = np.split(array, len(target.names), axis=layout.out_axis)
            weights.update(zip(target.names, chunks))
        else:
            weights[target] = array
    for name, pieces in parts.items():
        arrays = [pieces[index][0] for index in sorted(pieces)]
        weights[name] = np.concatenate(arrays, axis=pieces[0][1].out_axis)
    return _experts(weights)


def _keras_hub_tokenizer_to_tokenizers(hub, add_start):
    """A `tokenizers.Tokenizer` encoding as keras-hub's tokenizer `hub`."""
    if getattr(hub, "proto", None) is not None:  # SentencePiece
        return tokenizer_from_sentencepiece(
            hub.proto, add_bos_token=add_start, add_eos_token=False
        )
    if getattr(hub, "merges", None) is None:
        raise ValueError(
            f"keras-gen converts keras-hub's byte-pair and SentencePiece "
            f"tokenizers; this model's is a {type(hub).__name__}."
        )
    # keras-hub's BytePairTokenizer encodes with a `tokenizers` tokenizer of
    # its own when it has one (keras-hub 0.2x on): the same one, copied.
    own = getattr(hub, "_tokenizer", None)
    if isinstance(own, tokenizers.Tokenizer):
        tokenizer = tokenizers.Tokenizer.from_str(own.to_str())
    else:
        merges = [tuple(m.split(" ")) for m in hub.merges if "#version" not in m]
        tokenizer = tokenizers.Tokenizer(
            tokenizers.models.BPE(vocab=dict(hub.vocabulary), merges=merges)
        )
        tokenizer.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(
            add_prefix_space=bool(getattr(hub, "add_prefix_space", False))
        )
        tokenizer.decoder = tokenizers.decoders.ByteLevel()
        tokenizer.add_special_tokens(list(hub.unsplittable_tokens or []))
    if add_start:
        start = hub.start_token
        tokenizer.post_processor = tokenizers.processors.TemplateProcessing(
            single=f"{start}:0 $A:0",
            pair=f"{start}:0 $A:0 $B:1",
            special_tokens=[(start, hub.start_token_id)],
        )
    return tokenizer


def _tokenizer(task):
    """The keras-gen `Tokenizer` of a keras-hub task's preprocessor.

    It starts texts with the start token whenever the tokenizer has one:
    keras-hub's `generate_preprocess` always does (0.32 ignores the
    preprocessor's `add_start_token` there).
    """
    hub = getattr(getattr(task, "preprocessor", None), "tokenizer", None)
    if hub is None:
        return None
    add_start = getattr(hub, "start_token_id", None) is not None
    return Tokenizer(
        _keras_hub_tokenizer_to_tokenizers(hub, add_start),
        bos_token_id=getattr(hub, "start_token_id", None),
        eos_token_ids=getattr(hub, "end_token_id", None),
        pad_token_id=getattr(hub, "pad_token_id", None),
        sentencepiece_model=getattr(hub, "proto", None),
    )


def _converted_sampler(sampler, module):
    """`sampler` (either library's) as `module`'s sampler of the same
    name, or `None` (with a warning) where `module` has none."""
    name = type(sampler).__name__
    if name not in SAMPLERS:
        warnings.warn(
            f"The converted model cannot use the {name}: it is compiled "
            "with its library's default sampler.",
            stacklevel=4,
        )
        return None
    settings = {k: getattr(sampler, k) for k in SAMPLERS[name] if hasattr(sampler, k)}
    return getattr(module, name)(**settings)


def from_keras_hub(model, dtype=None):
    """See `CausalLM.from_keras_hub`."""
    keras_hub = _keras_hub()
    hub = _load(model)
    task = hub if isinstance(hub, keras_hub.models.CausalLM) else None
    backbone = hub.backbone if task is not None else hub
    family = _family(backbone)
    modes = {
        layer.quantization_mode
        for layer in backbone._flatten_layers()
        if getattr(layer, "quantization_mode", None)
    }
    if modes:
        raise ValueError(
            f"The keras-hub model is quantized ({sorted(modes)}): convert its "
            'float model, then quantize in keras-gen (`lm.quantize("int8")`).'
        )
    hub_config = backbone.get_config()
    # Some backbones (keras-hub 0.32's Llama) leave the tie out of their
    # config: the embedding layer knows.
    tied = getattr(getattr(backbone, "token_embedding", None), "tie_weights", None)
    if tied is not None:
        hub_config["tie_word_embeddings"] = tied
    config = {"architectures": [family.architecture], **family.hf_config(hub_config)}
    if dtype is None:
        dtype = keras.backend.standardize_dtype(backbone.dtype_policy.variable_dtype)
        dtype = dtype if dtype in checkpoint.DTYPES else "float32"
    tokenizer = _tokenizer(task)
    eos = tokenizer.eos_token_ids if tokenizer is not None else None
    reader = checkpoint.ArrayReader(
        hugging_face_weights(backbone, hub_config),
        f"the keras-hub {type(backbone).__name__}",
    )
    lm = checkpoint.build_causal_lm(
        config,
        reader,
        tokenizer,
        GenerationConfig(eos_token_id=eos or None),
        dtype=dtype,
    )
    sampler = getattr(task, "sampler", None)
    if sampler is not None and not isinstance(sampler, str):
        sampler = _converted_sampler(sampler, samplers)
    if sampler is not None:
        lm.compile(sampler=sampler)
    return lm


def _task_class(backbone_name):
    keras_hub = _keras_hub()
    for name in dir(keras_hub.models):
        candidate = getattr(keras_hub.models, name)
        if (
            isinstance(candidate, type)
            and issubclass(candidate, keras_hub.models.CausalLM)
            and getattr(candidate, "backbone_cls", None) is not None
            and candidate.backbone_cls.__name__ == backbone_name
        ):
            return candidate
    raise ValueError(f"keras-hub {keras_hub.__version__} has no {backbone_name}.")


def _is_byte_level(tokenizer):
    return tokenizer is not None and '"ByteLevel"' in tokenizer.tokenizer.to_str()


def _keras_hub_tokenizer(tokenizer, tokenizer_class):
    """keras-hub's tokenizer of a family from a keras-gen `Tokenizer`, or
    `None` (with a warning) where it cannot be built."""
    if tokenizer is None:
        return None
    if getattr(tokenizer, "sentencepiece_model", None) is not None:
        try:
            return tokenizer_class(proto=tokenizer.sentencepiece_model)
        except TypeError:  # a byte-pair family
            pass
    text = tokenizer.tokenizer.to_str()
    if '"ByteLevel"' in text and isinstance(
        tokenizer.tokenizer.model, tokenizers.models.BPE
    ):
        state = json.loads(text)
        vocabulary = dict(state["model"]["vocab"])
        for token in state.get("added_tokens", []):
            vocabulary[token["content"]] = token["id"]
        merges = [
            m if isinstance(m, str) else " ".join(m) for m in state["model"]["merges"]
        ]
        try:
            return tokenizer_class(vocabulary=vocabulary, merges=merges)
        except (TypeError, ValueError) as error:
            reason = str(error)
    else:
        reason = (
            "its tokenizer is not byte-level BPE and came without a SentencePiece model"
        )
    warnings.warn(
        f"The keras-hub model has no preprocessor ({reason}): it takes "
        "token ids, not text.",
        stacklevel=4,
    )
    return None


def keras_hub_weights(backbone, weights, config):
    """Fill a keras-hub backbone from `{Hugging Face name: array}`."""
    family = _family(backbone)
    used, groups = set(), {}

    def fetch(name, count):
        names = (
            [name.replace("{e}", str(e)) for e in range(count)]
            if "{e}" in name
            else [name]
        )
        missing = [n for n in names if n not in weights]
        if missing:
            raise ValueError(
                f"keras-hub's {type(backbone).__name__} needs {missing[0]!r}, "
                "which this model does not have."
            )
        used.update(names)
        arrays = [weights[n] for n in names]
        return np.stack(arrays) if "{e}" in name else arrays[0]

    for variable, target, layout in _matched(backbone, _rules(family, config)):
        shape = tuple(variable.shape)
        if isinstance(target, Part):
            groups.setdefault(target.name, []).append((target.index, variable, layout))
            continue
        if isinstance(target, Split):
            array = np.concatenate(
                [fetch(n, shape[0]) for n in target.names], axis=layout.out_axis
            )
        else:
            array = fetch(target, shape[0])
        variable.assign(layout.from_hf(array, shape))
    for name, members in groups.items():
        members.sort(key=lambda member: member[0])
        axis = members[0][2].out_axis
        sizes = [
            layout.to_hf(np.empty(variable.shape, "float32")).shape[axis]
            for _, variable, layout in members
        ]
        pieces = np.split(fetch(name, 1), np.cumsum(sizes)[:-1], axis=axis)
        for (_, variable, layout), piece in zip(members, pieces):
            variable.assign(layout.from_hf(piece, tuple(variable.shape)))
    unused = sorted(set(weights) - used)
    if unused:
        raise ValueError(
            f"keras-hub's {type(backbone).__name__} has no place for {unused[:5]}."
        )


def _config_sampler(config):
    """The sampler `generate` takes from a `GenerationConfig` (its other
    options, penalties and the like, have no keras-hub counterpart)."""
    if not config.do_sample:
        return samplers.GreedySampler()
    temperature = 1.0 if config.temperature is None else config.temperature
    if config.top_p is not None and config.top_p < 1.0:
        return samplers.TopPSampler(
            p=config.top_p, k=config.top_k, temperature=temperature
        )
    if config.top_k:
        return samplers.TopKSampler(k=config.top_k, temperature=temperature)
    return samplers.RandomSampler(temperature=temperature)


def to_keras_hub(causal_lm, path=None):
    """See `CausalLM.to_keras_hub`."""
    keras_hub = _keras_hub()
    config, _, weights = checkpoint.to_hugging_face(causal_lm)
    name = config["architectures"][0]
    backbone_name = BACKBONES.get(name)
    if backbone_name is None:
        raise ValueError(
            f"keras-hub has no counterpart of keras-gen's {name}; keras-gen "
            f"writes {sorted(BACKBONES)} to keras-hub."
        )
    llama3_rope = (config.get("rope_scaling") or {}).get("rope_type") == "llama3"
    if backbone_name == "LlamaBackbone" and (
        llama3_rope or _is_byte_level(causal_lm.tokenizer)
    ):
        backbone_name = "Llama3Backbone"
    task_class = _task_class(backbone_name)
    family = FAMILIES[backbone_name]
    hub_config = family.keras_hub_config(config)
    backbone = task_class.backbone_cls(**hub_config, dtype=config["dtype"])
    keras_hub_weights(backbone, weights, backbone.get_config())
    preprocessor_class = task_class.preprocessor_cls
    hub_tokenizer = _keras_hub_tokenizer(
        causal_lm.tokenizer, preprocessor_class.tokenizer_cls
    )
    preprocessor = None
    if hub_tokenizer is not None:
        # For `fit`: keras-hub's `generate` starts with the start token
        # whatever this says.
        tokenizer = causal_lm.tokenizer
        bos = tokenizer.bos_token_id
        adds_start = bos is not None and tokenizer.encode("")[:1] == [bos]
        preprocessor = preprocessor_class(
            tokenizer=hub_tokenizer, add_start_token=adds_start
        )
    task = task_class(backbone=backbone, preprocessor=preprocessor)
    sampler = causal_lm.sampler or _config_sampler(causal_lm.generation_config)
    if sampler is not None:
        sampler = _converted_sampler(sampler, keras_hub.samplers)
    if sampler is not None:
        task.compile(sampler=sampler)
    if path is not None:
        task.save_to_preset(os.fspath(path))
    return task
