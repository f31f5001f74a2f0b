"""Keras' Adam with its dense update in TensorFlow's fused kernel.

tf-keras' Adam updates each weight with about ten separate element-wise ops (two
moments, their squares, the bias corrections, the step), each one a pass over the
weight's memory. On a CPU, where XLA does not fuse them, that was 11.5 % of the flowers
CNN's op time (bench/profile_trainer.py): its first dense layer has four million weights.
``ResourceApplyAdam`` does the same arithmetic in one pass (TensorFlow's own kernel,
with CPU, GPU and XLA implementations), so the trainer's Adam hands it the dense
updates and leaves everything else (sparse gradients, AMSGrad, adaptive epsilon,
weight decay, EMA, clipping, the learning-rate schedule) to Keras.

It stays Keras' Adam in every other respect: the same slots, under the same names,
so backups and checkpoints are those of ``tf_keras.optimizers.Adam``; and the same
serialised name, so an exported model loads with Keras' own Adam where this module
is absent.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf
import tf_keras as keras


class Adam(keras.optimizers.Adam):  # type: ignore[misc]  # tf-keras ships no type information
    """``tf_keras.optimizers.Adam``, computing the same update in one fused kernel per weight.

    Named ``Adam`` on purpose: Keras serialises an optimizer by its class name, and an
    exported model must load with Keras' Adam, whose update this one computes.
    """

    def update_step(self, gradient: Any, variable: Any) -> None:
        if isinstance(gradient, tf.IndexedSlices) or self.amsgrad or self.adaptive_epsilon:
            super().update_step(gradient, variable)
            return
        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        index = self._index_dict[self._var_key(variable)]
        beta_1 = tf.cast(self.beta_1, dtype)
        beta_2 = tf.cast(self.beta_2, dtype)
        # The kernel's step: lr_t = lr * sqrt(1 - beta_2^t) / (1 - beta_1^t);
        # m += (g - m)(1 - beta_1); v += (g^2 - v)(1 - beta_2); w -= lr_t m / (sqrt(v) + epsilon):
        # Keras' Adam line for line.
        tf.raw_ops.ResourceApplyAdam(
            var=variable.handle,
            m=self._momentums[index].handle,
            v=self._velocities[index].handle,
            beta1_power=tf.pow(beta_1, step),
            beta2_power=tf.pow(beta_2, step),
            lr=tf.cast(self.learning_rate, dtype),
            beta1=beta_1,
            beta2=beta_2,
            epsilon=tf.cast(self.epsilon, dtype),
            grad=gradient,
        )
