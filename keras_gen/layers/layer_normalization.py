import keras

from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class LayerNormalization(LeanCall, keras.layers.LayerNormalization):
    """`keras.layers.LayerNormalization`, cheap to trace (`LeanCall`)."""
