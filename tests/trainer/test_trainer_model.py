"""The two built-in networks, built in-process: what a user's exported model takes in and gives back.

The end-to-end runs (fit, checkpoints, export) use the CNN; every model goes
through the same path, so ResNet50 is checked here as a network only, without
the minute that tracing and saving its 23 million weights would cost.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from trainer.model import build_model

IMAGE_SIZE = 32
NUM_CLASSES = 5
# Keras' ResNet50 without its top (https://keras.io/api/applications/: 25.6 M with the
# 1000-class top, whose Dense layer holds 2,049,000) plus our Dense(5) head.
RESNET50_BACKBONE_PARAMS = 23_587_712


@pytest.fixture
def mixed_precision() -> Iterator[None]:
    import tf_keras as keras

    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy("float32")


@pytest.mark.parametrize("name", ["cnn", "resnet50"])
def test_each_model_maps_images_to_class_probabilities(name: str) -> None:
    model = build_model(name, IMAGE_SIZE, NUM_CLASSES)
    assert model.input_shape == (None, IMAGE_SIZE, IMAGE_SIZE, 3)
    assert model.output_shape == (None, NUM_CLASSES)
    images = np.random.default_rng(0).uniform(0, 255, (2, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    probabilities = model(images, training=False).numpy()
    assert probabilities.shape == (2, NUM_CLASSES)
    assert np.all(probabilities >= 0)
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-5)


def test_resnet50_is_keras_resnet50_with_a_head_for_the_jobs_classes() -> None:
    model = build_model("resnet50", IMAGE_SIZE, NUM_CLASSES)
    assert model.name == "resnet50"
    assert model.count_params() == RESNET50_BACKBONE_PARAMS + 2048 * NUM_CLASSES + NUM_CLASSES


@pytest.mark.usefixtures("mixed_precision")
@pytest.mark.parametrize("name", ["cnn", "resnet50"])
def test_probabilities_stay_float32_under_mixed_precision(name: str) -> None:
    model = build_model(name, IMAGE_SIZE, NUM_CLASSES)
    assert model.layers[-1].compute_dtype == "float32"
    images = np.zeros((1, IMAGE_SIZE, IMAGE_SIZE, 3), "float32")
    assert model(images, training=False).dtype.name == "float32"


def test_an_unknown_model_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="unknown model 'vgg16'"):
        build_model("vgg16", IMAGE_SIZE, NUM_CLASSES)
