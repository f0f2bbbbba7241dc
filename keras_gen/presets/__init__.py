"""Models that ship inside the package, loaded with `CausalLM.from_preset`.

Each preset is a Hugging Face style folder under `keras_gen/presets/<name>/`
(`config.json`, `model.safetensors`, `tokenizer.json`, ...), so
`from_preset(name)` is `from_pretrained` on that folder.

- `"demo"`: a 1.1M-parameter GPT-2 trained by `tools/train_demo_model.py`
  on the Python documentation topics that CPython bundles
  (`pydoc_data.topics`). It writes English-like text about Python; it
  knows nothing else and is not a useful assistant.
"""

import os

PRESETS_DIR = os.path.dirname(os.path.abspath(__file__))


def list_presets():
    """The names of the bundled presets."""
    return sorted(
        name
        for name in os.listdir(PRESETS_DIR)
        if os.path.isfile(os.path.join(PRESETS_DIR, name, "config.json"))
    )


def preset_path(name):
    """The folder of a bundled preset, or a ValueError naming the presets."""
    if not isinstance(name, str) or name not in list_presets():
        raise ValueError(
            f"Unknown preset {name!r}. Bundled presets: {list_presets()}. "
            "For a model folder on disk use `CausalLM.from_pretrained(path)`."
        )
    return os.path.join(PRESETS_DIR, name)
