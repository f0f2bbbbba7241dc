import keras
from keras.src.backend.common.variables import AutocastScope
from keras.src.backend.common.variables import get_autocast_scope

from keras_gen import backend


class LeanCall:
    """Mixin for Keras layers: while torch.compile traces a step, calling
    the layer runs only what generation needs of Keras' `Layer.__call__`.

    Dynamo interprets every bytecode of the Python it traces, and Keras'
    call machinery (argument binding, masks, name scopes, attribute
    tracking) costs about 0.1 s of tracing per call: GPT-2 small's step
    (some 150 layer calls) traced in 74 s through `__call__` against 22 s
    this way (jax and tensorflow trace by running the Python: no cost to
    speak of). What is kept: the quantized call of a quantized layer,
    floating inputs cast to the compute dtype, and variables read in the
    compute dtype under a mixed policy. The layer must be built.
    """

    def __call__(self, *args, **kwargs):
        if not backend.compiling_python():
            return super().__call__(*args, **kwargs)
        call = self.quantized_call if self.quantization_mode else self.call
        args = tuple(self._lean_input(x) for x in args)
        kwargs = {name: self._lean_input(x) for name, x in kwargs.items()}
        scope = self._lean_autocast_scope()
        if scope is None:
            return call(*args, **kwargs)
        with scope:
            return call(*args, **kwargs)

    def _lean_input(self, x):
        # Keras casts floating tensors to the compute dtype; here only
        # top-level ones (generation passes its caches in that dtype).
        if (
            self._convert_input_args
            and self.autocast
            and keras.ops.is_tensor(x)
            and keras.backend.is_float_dtype(x.dtype)
            and keras.backend.standardize_dtype(x.dtype) != self.input_dtype
        ):
            return keras.ops.cast(x, self.input_dtype)
        return x

    def _lean_autocast_scope(self):
        # Keras' own rule (`Layer.__call__`).
        current = get_autocast_scope()
        if current is not None:
            if not self.autocast or not keras.backend.is_float_dtype(
                self.compute_dtype
            ):
                return AutocastScope(None)
            if current.dtype != self.compute_dtype:
                return AutocastScope(self.compute_dtype)
            return None
        if self.compute_dtype != self.variable_dtype:
            return AutocastScope(self.compute_dtype)
        return None
