"""Samplers: how the next token is chosen from logits."""

from keras_gen.samplers.beam_sampler import BeamSampler
from keras_gen.samplers.contrastive_sampler import ContrastiveSampler
from keras_gen.samplers.greedy_sampler import GreedySampler
from keras_gen.samplers.min_p_sampler import MinPSampler
from keras_gen.samplers.random_sampler import RandomSampler
from keras_gen.samplers.registry import get
from keras_gen.samplers.registry import register
from keras_gen.samplers.registry import serialize
from keras_gen.samplers.sampler import Sampler
from keras_gen.samplers.top_k_sampler import TopKSampler
from keras_gen.samplers.top_p_sampler import TopPSampler
