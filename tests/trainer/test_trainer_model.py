"""The two built-in networks, built in-process: what a user's exported model takes in and gives back.

The end-to-end runs (fit, checkpoints, export) use the CNN; every model goes
through the same path, so ResNet50 is checked here as a network only, without
the minute that tracing and saving its 23 million weights would cost.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

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


@pytest.mark.slow
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


@pytest.mark.slow
def test_resnet50_is_keras_resnet50_with_a_head_for_the_jobs_classes() -> None:
    model = build_model("resnet50", IMAGE_SIZE, NUM_CLASSES)
    assert model.name == "resnet50"
    assert model.count_params() == RESNET50_BACKBONE_PARAMS + 2048 * NUM_CLASSES + NUM_CLASSES


@pytest.mark.slow
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


@pytest.mark.slow
def test_an_epoch_checkpoint_holds_the_weights_the_evaluator_restores_and_no_optimizer_state(
    tmp_path: Path,
) -> None:
    """Adam keeps two slots per weight; the backup needs them to resume, an epoch checkpoint does
    not (the evaluator and a user restore weights from it). Writing them made every epoch's
    checkpoint three times the size of the weights, and its save three times as long."""
    import tensorflow as tf

    from trainer.callbacks import EpochCheckpoint, Saving
    from trainer.checkpointing import RunRecord, SaveInterval, TrainingClock
    from trainer.config import parse_args
    from trainer.jobdir import JobLayout
    from trainer.model import compile_model

    layout = JobLayout.from_config(parse_args(["--job-dir", str(tmp_path), "--data", "synthetic"], environ={}))
    record = RunRecord(steps_per_epoch=2)
    model = build_model("cnn", IMAGE_SIZE, NUM_CLASSES)
    compile_model(model, 1e-3, steps_per_execution=1, jit_compile=False)
    images = np.random.default_rng(0).uniform(0, 255, (8, IMAGE_SIZE, IMAGE_SIZE, 3)).astype("float32")
    labels = np.arange(8) % NUM_CLASSES
    clock = TrainingClock()
    saving = Saving(SaveInterval(clock, 300), SaveInterval(clock, 300), True, False, record.pending)
    checkpoint = EpochCheckpoint(tf.distribute.get_strategy(), layout, record, "chief", 0, saving)
    model.fit(images, labels, batch_size=4, epochs=1, callbacks=[checkpoint], verbose=0)

    saved = tf.train.latest_checkpoint(layout.checkpoint_dir)
    names = tf.train.load_checkpoint(saved).get_variable_to_shape_map()
    assert not [name for name in names if name.startswith("model/optimizer")]
    assert sum(1 for name in names if name.startswith("model/layer_with_weights-")) == len(model.weights)
    assert record.saving > 0

    # What the evaluator does (trainer/roles.py): a model built and compiled the same way.
    evaluator = build_model("cnn", IMAGE_SIZE, NUM_CLASSES)
    compile_model(evaluator, 1e-3, steps_per_execution=1, jit_compile=False)
    tf.train.Checkpoint(model=evaluator).restore(saved).expect_partial()
    np.testing.assert_array_equal(evaluator.predict(images, verbose=0), model.predict(images, verbose=0))
