"""The networks: the flowers CNN of TensorFlow's image classification tutorial and Keras' ResNet50 (random init).

tf-keras (the Keras 2 line, ``import tf_keras as keras``) is used throughout:
Keras 3 cannot train under MultiWorkerMirroredStrategy (keras-team/keras#20585)
and only tf-keras drives ParameterServerStrategy from ``model.fit``.
"""

from __future__ import annotations

from typing import Any


def build_cnn(image_size: int, num_classes: int) -> Any:
    """The CNN of https://www.tensorflow.org/tutorials/images/classification, layer for layer.

    The tutorial starts with a Resizing layer; here the input pipeline already
    resizes (in parallel, once, before caching), so running it again inside
    every training step would only cost time.
    """
    import tf_keras as keras

    layers = keras.layers
    return keras.Sequential(
        [
            keras.Input(shape=(image_size, image_size, 3)),
            layers.Rescaling(1.0 / 255),
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(num_classes),
            # Softmax in float32 keeps the loss stable under mixed precision.
            layers.Activation("softmax", dtype="float32"),
        ],
        name="flowers_cnn",
    )


def build_resnet50(image_size: int, num_classes: int) -> Any:
    import tf_keras as keras

    inputs = keras.Input(shape=(image_size, image_size, 3))
    # Scale to [-1, 1]; with random weights the ImageNet mean subtraction buys nothing.
    scaled = keras.layers.Rescaling(1.0 / 127.5, offset=-1.0)(inputs)
    backbone = keras.applications.ResNet50(include_top=False, weights=None, input_tensor=scaled, pooling="avg")
    logits = keras.layers.Dense(num_classes)(backbone.output)
    outputs = keras.layers.Activation("softmax", dtype="float32")(logits)
    return keras.Model(inputs, outputs, name="resnet50")


def build_model(name: str, image_size: int, num_classes: int) -> Any:
    if name == "cnn":
        return build_cnn(image_size, num_classes)
    if name == "resnet50":
        return build_resnet50(image_size, num_classes)
    raise ValueError(f"unknown model {name!r}")


def compile_model(model: Any, learning_rate: float, steps_per_execution: int, jit_compile: bool) -> None:
    """Adam + sparse cross-entropy + accuracy, as the seed, with the speed knobs (and Adam's
    update fused into one kernel per weight: trainer/optimizer.py)."""
    import tf_keras as keras

    from trainer.optimizer import Adam

    model.compile(
        optimizer=Adam(learning_rate=learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(),
        metrics=["accuracy"],
        steps_per_execution=steps_per_execution,
        jit_compile=jit_compile,
    )
