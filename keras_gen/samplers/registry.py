"""Samplers by name."""

from keras_gen.samplers.beam_sampler import BeamSampler
from keras_gen.samplers.contrastive_sampler import ContrastiveSampler
from keras_gen.samplers.greedy_sampler import GreedySampler
from keras_gen.samplers.min_p_sampler import MinPSampler
from keras_gen.samplers.random_sampler import RandomSampler
from keras_gen.samplers.sampler import Sampler
from keras_gen.samplers.top_k_sampler import TopKSampler
from keras_gen.samplers.top_p_sampler import TopPSampler

SAMPLERS = {
    "greedy": GreedySampler,
    "random": RandomSampler,
    "top_k": TopKSampler,
    "top_p": TopPSampler,
    "min_p": MinPSampler,
    "beam": BeamSampler,
    "contrastive": ContrastiveSampler,
}


def register(name, cls):
    """Make `cls` available as `get(name)`."""
    SAMPLERS[name] = cls


def get(identifier):
    """A sampler from a lowercase name, a config dict or an instance.

    Examples:
    >>> type(get("top_k")).__name__
    'TopKSampler'
    >>> get({"name": "top_p", "config": {"p": 0.5}}).p
    0.5
    """
    if isinstance(identifier, Sampler):
        return identifier
    if isinstance(identifier, str):
        if identifier not in SAMPLERS:
            raise ValueError(
                f"Unknown sampler {identifier!r}. Allowed names: "
                f"{sorted(SAMPLERS)}, or a `Sampler` instance."
            )
        return SAMPLERS[identifier]()
    if isinstance(identifier, dict) and identifier.get("name") in SAMPLERS:
        return SAMPLERS[identifier["name"]].from_config(identifier["config"])
    raise TypeError(
        "`sampler` must be a name in "
        f"{sorted(SAMPLERS)}, a config dict or a `Sampler` instance. "
        f"Received: sampler={identifier!r}"
    )


def serialize(sampler):
    """The config dict that `get` turns back into `sampler`."""
    for name, cls in SAMPLERS.items():
        if type(sampler) is cls:
            return {"name": name, "config": sampler.get_config()}
    raise ValueError(f"{type(sampler).__name__} is not registered.")
