import pytest

from keras_gen import samplers


@pytest.mark.parametrize(
    "name, cls",
    [
        ("greedy", samplers.GreedySampler),
        ("random", samplers.RandomSampler),
        ("top_k", samplers.TopKSampler),
        ("top_p", samplers.TopPSampler),
        ("min_p", samplers.MinPSampler),
    ],
)
def test_get_by_name_and_serialize_round_trip(name, cls):
    sampler = samplers.get(name)
    assert type(sampler) is cls
    assert type(samplers.get(samplers.serialize(sampler))) is cls


def test_instances_pass_through():
    sampler = samplers.TopKSampler(k=3)
    assert samplers.get(sampler) is sampler


def test_config_dict_keeps_values():
    config = samplers.serialize(samplers.TopPSampler(p=0.5, k=4, temperature=0.3))
    sampler = samplers.get(config)
    assert (sampler.p, sampler.k, sampler.temperature) == (0.5, 4, 0.3)


def test_unknown_name_lists_the_allowed_ones():
    with pytest.raises(ValueError, match="'greedy'"):
        samplers.get("beam_me_up")


def test_register_a_user_sampler():
    class FirstTokenSampler(samplers.Sampler):
        def get_next_token(self, logits, seed):
            return logits[:, 0] * 0

    samplers.register("first_token", FirstTokenSampler)
    assert type(samplers.get("first_token")) is FirstTokenSampler
    del samplers.registry.SAMPLERS["first_token"]
