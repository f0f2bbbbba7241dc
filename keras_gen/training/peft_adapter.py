"""LoRA adapters in PEFT's folder format, which transformers and vLLM load.

A folder holds `adapter_config.json` and `adapter_model.safetensors`, whose
tensors are named after the Hugging Face modules they adapt:
`base_model.model.<module>.lora_A.weight` `(r, in)` and `.lora_B.weight`
`(out, r)`, the transposes of Keras' `lora_kernel_a` `(in, r)` and
`lora_kernel_b` `(r, out)`, scaled by `lora_alpha / r` (or
`lora_alpha / sqrt(r)` with `use_rslora`).
"""

import collections
import json
import math
import os
import re

import keras
import numpy as np
import safetensors
import safetensors.numpy

from keras_gen.models import architectures
from keras_gen.training import lora
from keras_gen.utils import checks
from keras_gen.utils.files import read_json_object

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"
PREFIX = "base_model.model."
SUFFIXES = {"A": ".lora_A.weight", "B": ".lora_B.weight"}


def _modules(backbone):
    """`{Hugging Face module name: (Dense, stored as (in, out))}` for every
    projection an adapter can target."""
    converter = architectures.converter_for_backbone(backbone)
    paths = {layer._kernel.path: layer for _, layer in lora.projections(backbone)}
    modules = {}
    for name, variable, transpose in converter.weight_map(backbone):
        if isinstance(name, str) and variable.path in paths:
            modules[name.removesuffix(".weight")] = (
                paths[variable.path],
                not transpose,
            )
    return modules


def _target_modules(modules, names):
    """PEFT's `target_modules`: the short names, when they pick exactly the
    adapted modules, or else the full names."""
    short = sorted({name.rsplit(".", 1)[-1] for name in names})
    picked = {name for name in modules if name.rsplit(".", 1)[-1] in short}
    return short if picked == set(names) else sorted(names)


def save(causal_lm, path):
    """Write the adapters of `causal_lm` as a PEFT folder at `path`."""
    backbone = causal_lm.backbone
    modules = _modules(backbone)
    adapted = {
        name: layer for name, (layer, _) in modules.items() if layer.lora_enabled
    }
    if not adapted:
        raise ValueError(
            "The model has no adapters to save: `lm.backbone.enable_lora(rank)` "
            "first (`save_pretrained` writes the whole model)."
        )
    tensors, ranks, alphas = {}, {}, {}
    for name, layer in adapted.items():
        a = keras.ops.convert_to_numpy(layer.lora_kernel_a).astype("float32")
        b = keras.ops.convert_to_numpy(layer.lora_kernel_b).astype("float32")
        tensors[f"{PREFIX}{name}{SUFFIXES['A']}"] = np.ascontiguousarray(a.T)
        tensors[f"{PREFIX}{name}{SUFFIXES['B']}"] = np.ascontiguousarray(b.T)
        ranks[name], alphas[name] = int(layer.lora_rank), float(layer.lora_alpha)
    rank = collections.Counter(ranks.values()).most_common(1)[0][0]
    alpha = collections.Counter(alphas.values()).most_common(1)[0][0]
    config = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": _target_modules(modules, adapted),
        "rank_pattern": {re.escape(n): r for n, r in ranks.items() if r != rank},
        "alpha_pattern": {re.escape(n): a for n, a in alphas.items() if a != alpha},
        "lora_dropout": 0.0,
        "bias": "none",
        # GPT-2's `Conv1D` stores its weight `(in, out)`.
        "fan_in_fan_out": all(modules[n][1] for n in adapted),
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "init_lora_weights": True,
        "inference_mode": True,
        "base_model_name_or_path": None,
    }
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, CONFIG_FILE), "w") as f:
        json.dump(config, f, indent=2)
    safetensors.numpy.save_file(
        tensors, os.path.join(path, WEIGHTS_FILE), metadata={"format": "pt"}
    )


def _read_config(path):
    config_file = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(config_file):
        raise FileNotFoundError(
            f"No {CONFIG_FILE} in {path!r}: a PEFT adapter folder holds "
            f"{CONFIG_FILE} and {WEIGHTS_FILE}."
        )
    config = read_json_object(config_file)
    if config.get("peft_type") != "LORA":
        raise ValueError(
            f"{config_file} holds a {config.get('peft_type')!r} adapter; "
            "keras-gen loads LoRA adapters only."
        )
    unsupported = {
        "use_dora": bool(config.get("use_dora")),
        "modules_to_save": bool(config.get("modules_to_save")),
        "bias": config.get("bias", "none") != "none",
    }
    named = [key for key, on in unsupported.items() if on]
    if named:
        raise ValueError(
            f"{config_file} sets {named}: keras-gen loads plain LoRA adapters "
            "(no DoRA, no bias training, no fully saved modules)."
        )
    rank, alpha = config.get("r", 8), config.get("lora_alpha", 8)
    if not checks.is_int(rank) or rank < 1:
        raise ValueError(f"{config_file}: `r` must be an int >= 1. Received: {rank!r}")
    if not checks.is_number(alpha) or not math.isfinite(alpha):
        raise ValueError(
            f"{config_file}: `lora_alpha` must be a finite number. Received: {alpha!r}"
        )
    targets = config.get("target_modules")
    try:
        if isinstance(targets, str):
            re.compile(targets)
        elif targets is not None and not all(isinstance(t, str) for t in targets):
            raise TypeError
    except (TypeError, re.error):
        raise ValueError(
            f"{config_file}: `target_modules` must be a list of names or a "
            f"regular expression. Received: {targets!r:.200}"
        ) from None
    return config


def _targeted(targets, name):
    """Whether PEFT's `target_modules` (names, or one regular expression)
    selects the module `name`."""
    if targets is None:
        return True
    if isinstance(targets, str):
        return re.fullmatch(targets, name) is not None
    return any(name == t or name.endswith("." + t) for t in targets)


def _pattern_value(patterns, name, default):
    """PEFT's per-module override: the first pattern the name ends with."""
    for pattern, value in (patterns or {}).items():
        if re.match(rf"(.*\.)?({pattern})$", name):
            return value
    return default


def _read_pairs(weights_file):
    """`{module name: {"A": matrix, "B": matrix}}` from the weights file."""
    pairs = collections.defaultdict(dict)
    with safetensors.safe_open(weights_file, framework="numpy") as f:
        for key in f.keys():
            name = key.removeprefix(PREFIX).replace(".default.", ".")
            for part, suffix in SUFFIXES.items():
                if name.endswith(suffix):
                    pairs[name.removesuffix(suffix)][part] = f.get_tensor(key)
                    break
            else:
                raise ValueError(
                    f"{weights_file} holds {key!r}, which is not a LoRA matrix "
                    "of a projection (embedding adapters are not supported)."
                )
    return pairs


def _check_pair(weights_file, config, name, pair):
    """The adapter of module `name` agrees with the config: its rank, and
    finite numbers."""
    rank = pair["A"].shape[0]
    expected = _pattern_value(config.get("rank_pattern"), name, config.get("r", 8))
    if rank != expected:
        raise ValueError(
            f"{weights_file}: the adapter of {name} has rank {rank}, but its "
            f"config says r={expected} (is it the adapter of another config?)."
        )
    for part, matrix in pair.items():
        if not np.issubdtype(matrix.dtype, np.floating) or not np.all(
            np.isfinite(matrix)
        ):
            raise ValueError(
                f"{weights_file}: lora_{part} of {name} must hold finite floats."
            )


def load(causal_lm, path):
    """Read a PEFT LoRA folder into `causal_lm`'s backbone."""
    path = os.fspath(path)
    config = _read_config(path)
    weights_file = os.path.join(path, WEIGHTS_FILE)
    if not os.path.isfile(weights_file):
        raise FileNotFoundError(
            f"No {WEIGHTS_FILE} in {path!r} (keras-gen reads safetensors "
            "adapters only, never pickle files)."
        )
    backbone = causal_lm.backbone
    modules = _modules(backbone)
    targets = config.get("target_modules")
    if not any(_targeted(targets, name) for name in modules):
        raise ValueError(
            f"The `target_modules` of {os.path.join(path, CONFIG_FILE)} "
            f"({targets!r:.200}) match none of this {type(backbone).__name__}'s "
            f"projections (such as {sorted(modules)[:3]})."
        )
    try:
        pairs = _read_pairs(weights_file)
    except (OSError, safetensors.SafetensorError) as error:
        raise ValueError(
            f"{weights_file} is not a readable safetensors file: {error}"
        ) from None
    if not pairs:
        raise ValueError(f"{weights_file} holds no LoRA matrices.")
    unknown = sorted(set(pairs) - set(modules))
    if unknown:
        raise ValueError(
            f"The adapter in {path!r} adapts {unknown[:3]}, which are not "
            f"projections this {type(backbone).__name__} can adapt (experts "
            "take no adapters; or is it an adapter of another model?)."
        )
    halves = sorted(n for n, p in pairs.items() if len(p) != 2)
    if halves:
        raise ValueError(f"{weights_file} lacks lora_A or lora_B for {halves[:3]}.")
    if lora.adapted(backbone):
        raise ValueError(
            "The model already has adapters: `merge_lora()` them, or load the "
            "adapter into a fresh model."
        )
    by_rank = collections.defaultdict(list)
    for name, pair in pairs.items():
        _check_pair(weights_file, config, name, pair)
        layer, _ = modules[name]
        rank = pair["A"].shape[0]
        shapes = (tuple(pair["A"].shape), tuple(pair["B"].shape))
        expected = ((rank, layer.kernel.shape[0]), (layer.kernel.shape[1], rank))
        if shapes != expected:
            raise ValueError(
                f"The adapter of {name} has shapes {shapes}; the model's "
                f"projection needs {expected}."
            )
        alpha = _pattern_value(
            config.get("alpha_pattern"), name, config.get("lora_alpha", 8)
        )
        if config.get("use_rslora"):
            # Keras scales by alpha / r; rsLoRA by alpha / sqrt(r).
            alpha = alpha * math.sqrt(rank)
        by_rank[(rank, float(alpha))].append((layer, pair))
    for (rank, alpha), entries in by_rank.items():
        lora.enable(backbone, [layer for layer, _ in entries], rank, alpha)
        for layer, pair in entries:
            layer.lora_kernel_a.assign(pair["A"].T.astype("float32"))
            layer.lora_kernel_b.assign(pair["B"].T.astype("float32"))
    return len(pairs)
