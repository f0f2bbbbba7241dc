import keras

from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class Dropout(LeanCall, keras.layers.Dropout):
    """`keras.layers.Dropout`, cheap to trace (`LeanCall`)."""
