"""Training: text preprocessing for `fit`, LoRA, PEFT adapters."""

from keras_gen.training.causal_lm_preprocessor import CausalLMPreprocessor
