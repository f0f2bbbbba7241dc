"""Which converter reads and writes each Hugging Face architecture.

Each family folder registers its converter when it is imported
(`keras_gen.models` imports them all): the `architectures` names of
`config.json` it reads, their `model_type`s (for configs without
`architectures`), and the backbone class it writes back. Adding a family
touches no list here.
"""

# `config.json`'s `architectures` entry -> the converter for it.
ARCHITECTURES = {}
# `model_type`, for configs without `architectures` -> the architecture.
MODEL_TYPES = {}
# Backbone class -> the converter that writes it back.
BACKBONES = {}


def register(converter, architectures, backbone_class):
    """Register `converter` (a module with the converter interface).

    Args:
        converter: the family's converter module.
        architectures: dict, Hugging Face architecture name -> model_type.
        backbone_class: the family's backbone class.
    """
    for name, model_type in architectures.items():
        ARCHITECTURES[name] = converter
        MODEL_TYPES[model_type] = name
    BACKBONES[backbone_class] = converter


def converter_for_backbone(backbone):
    """The converter that writes `backbone`, or a `ValueError`."""
    for cls in type(backbone).__mro__:
        if cls in BACKBONES:
            return BACKBONES[cls]
    raise ValueError(
        f"`save_pretrained` writes {sorted(c.__name__ for c in BACKBONES)} "
        f"models; this model's backbone is a {type(backbone).__name__}."
    )
