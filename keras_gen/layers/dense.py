import keras

from keras_gen import backend
from keras_gen.layers.lean_call import LeanCall


@keras.saving.register_keras_serializable(package="keras_gen")
class Dense(LeanCall, keras.layers.Dense):
    """`keras.layers.Dense` whose products run the fastest forms the
    backend has, outside training.

    Keras' int8 `Dense` multiplies through a custom-gradient function (which
    `torch.compile` cannot capture in one graph) and, on torch's CPU, casts
    int8 operands to int32. Outside training, and without LoRA adapters,
    this layer calls `backend.int8_matmul` instead: the same numbers, in
    one compiled step on every backend. Training keeps Keras' path, whose
    gradient flows to the inputs (and the adapters).
    """

    def call(self, inputs, training=None):
        # Float kernels: `backend.matmul` (torch picks the product form its
        # BLAS runs fastest for the row count). Training and LoRA keep Keras'.
        if training or self.lora_enabled:
            return super().call(inputs, training=training)
        return self._bias_and_activation(backend.matmul(inputs, self.kernel))

    def quantize(self, mode=None, type_check=True, config=None):
        # Keras quantizes a subclass of `Dense` only when told to skip its
        # type check: this one keeps `Dense`'s variables and calls.
        super().quantize(mode, type_check=False, config=config)

    def _int8_call(self, inputs, training=None):
        quantizer = self.inputs_quantizer
        # `backend.int8_matmul` quantizes rows as Keras' default quantizer
        # (`AbsMaxQuantizer` over [-127, 127]) does.
        default = quantizer is None or (
            tuple(getattr(quantizer, "value_range", ())) == (-127, 127)
        )
        if training or self.lora_enabled or not default:
            return super()._int8_call(inputs, training=training)
        x = backend.int8_matmul(
            inputs,
            self._kernel,
            self.kernel_scale,
            quantize_inputs=quantizer is not None,
        )
        return self._bias_and_activation(x)

    def _bias_and_activation(self, x):
        if self.bias is not None:
            x = keras.ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x
