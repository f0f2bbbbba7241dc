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

    def _int4_call(self, inputs, training=None):
        # Keras' int4 call multiplies through a custom-gradient function;
        # outside training, the kernel is unpacked and dequantized in the
        # step (weight-only int4: the product runs in the inputs' dtype).
        if training or self.lora_enabled or self.inputs_quantizer is not None:
            return super()._int4_call(inputs, training=training)
        kernel = self.dequantized_int4_kernel(inputs.dtype)
        return self._bias_and_activation(backend.matmul(inputs, kernel))

    def dequantized_int4_kernel(self, dtype="float32"):
        """The float `(in, out)` kernel of an int4-quantized layer: one
        scale per output (`block_size=None`), or per group of `block_size`
        inputs, with a zero point, as Keras' sub-channel int4 (and GPTQ)
        keep it: `(q - zero[g]) * scale[g]`."""
        ops = keras.ops
        values = keras.quantizers.unpack_int4(
            self._kernel, self._orig_output_dim, axis=-1
        )
        values = ops.cast(values, dtype)
        if getattr(self, "_int4_block_size", None) in (None, -1):
            return values / ops.cast(self.kernel_scale, dtype)
        groups = ops.cast(self.g_idx, "int32")
        scale = ops.cast(ops.take(self.kernel_scale, groups, axis=0), dtype)
        zero = ops.cast(ops.take(self.kernel_zero, groups, axis=0), dtype)
        return (values - zero) * scale

    def _bias_and_activation(self, x):
        if self.bias is not None:
            x = keras.ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return x
