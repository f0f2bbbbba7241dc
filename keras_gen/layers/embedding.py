import keras

from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class Embedding(LeanCall, keras.layers.Embedding):
    """`keras.layers.Embedding`, cheap to trace (`LeanCall`)."""

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras quantizes a subclass of `Embedding` only when told to skip
        # its type check: this one keeps `Embedding`'s variables and calls.
        super().quantize(mode, type_check=False, config=config)
