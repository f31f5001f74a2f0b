"""The trainer's Adam (trainer/optimizer.py): Keras' Adam in every way a user can see, with the
dense update in TensorFlow's fused kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

BATCHES = 6
BATCH_SIZE = 4


def _network(keras: Any) -> Any:
    """Dense gradients (a convolution and dense layers) and sparse ones (an embedding)."""
    images = keras.Input((8, 8, 3))
    tokens = keras.Input((2,), dtype="int32")
    features = keras.layers.Flatten()(keras.layers.Conv2D(4, 3, activation="relu")(images))
    embedded = keras.layers.Flatten()(keras.layers.Embedding(10, 3)(tokens))
    logits = keras.layers.Dense(5)(keras.layers.Concatenate()([features, embedded]))
    return keras.Model([images, tokens], keras.layers.Activation("softmax", dtype="float32")(logits))


def _examples() -> tuple[list[np.ndarray], np.ndarray]:
    generator = np.random.default_rng(0)
    images = generator.normal(size=(BATCHES * BATCH_SIZE, 8, 8, 3)).astype("float32")
    tokens = generator.integers(0, 10, size=(BATCHES * BATCH_SIZE, 2)).astype("int32")
    return [images, tokens], np.arange(BATCHES * BATCH_SIZE) % 5


def _trained(optimizer: Any, epochs: int = 3) -> Any:
    import tf_keras as keras

    keras.utils.set_random_seed(7)
    model = _network(keras)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    inputs, labels = _examples()
    model.fit(inputs, labels, batch_size=BATCH_SIZE, epochs=epochs, shuffle=False, verbose=0)
    return model


@pytest.mark.parametrize("options", [{}, {"amsgrad": True}], ids=["adam", "amsgrad"])
def test_the_trainers_adam_trains_to_the_weights_keras_adam_trains_to(options: dict[str, Any]) -> None:
    import tf_keras as keras

    from trainer.optimizer import Adam

    ours = _trained(Adam(learning_rate=0.01, **options))
    theirs = _trained(keras.optimizers.Adam(learning_rate=0.01, **options))

    assert ours.optimizer.iterations.numpy() == theirs.optimizer.iterations.numpy() == 3 * BATCHES
    for mine, keras_weight in zip(ours.weights, theirs.weights, strict=True):
        # Weights move by about 0.1 over these steps (0.01 a step); the kernel only orders the
        # float32 arithmetic differently, which leaves differences below a millionth.
        np.testing.assert_allclose(mine.numpy(), keras_weight.numpy(), rtol=0, atol=2e-6, err_msg=mine.name)
    for mine, keras_slot in zip(ours.optimizer.variables(), theirs.optimizer.variables(), strict=True):
        np.testing.assert_allclose(mine.numpy(), keras_slot.numpy(), rtol=0, atol=2e-6, err_msg=mine.name)


def test_each_dense_weight_is_updated_by_one_fused_kernel_and_the_embedding_by_keras() -> None:
    import tensorflow as tf

    from trainer.optimizer import Adam

    model = _trained(Adam(learning_rate=0.01), epochs=1)
    inputs, labels = _examples()
    dataset = tf.data.Dataset.from_tensors((tuple(inputs), labels))
    graph = model.make_train_function().get_concrete_function(iter(dataset)).graph

    def ops_of(function_graph: Any) -> list[str]:
        names = [op.type for op in function_graph.get_operations()]
        for function in function_graph._functions.values():  # the while loop's body and the update step
            names += [node.op for node in function.definition.node_def]
        return names

    fused = ops_of(graph).count("ResourceApplyAdam")
    dense_weights = [weight for weight in model.trainable_weights if "embedding" not in weight.name]
    assert fused == len(dense_weights)


def test_a_backup_made_with_keras_adam_resumes_with_the_trainers_and_the_other_way_round(tmp_path: Path) -> None:
    import tensorflow as tf
    import tf_keras as keras

    from trainer.optimizer import Adam

    for writer, reader in ((keras.optimizers.Adam, Adam), (Adam, keras.optimizers.Adam)):
        trained = _trained(writer(learning_rate=0.01), epochs=1)
        path = tf.train.Checkpoint(model=trained, optimizer=trained.optimizer).write(str(tmp_path / writer.__module__))

        resumed = _network(keras)
        resumed.compile(optimizer=reader(learning_rate=0.01), loss="sparse_categorical_crossentropy")
        resumed.optimizer.build(resumed.trainable_variables)
        tf.train.Checkpoint(model=resumed, optimizer=resumed.optimizer).read(path).assert_consumed()

        assert resumed.optimizer.iterations.numpy() == BATCHES
        for restored, saved in zip(resumed.optimizer.variables(), trained.optimizer.variables(), strict=True):
            np.testing.assert_array_equal(restored.numpy(), saved.numpy())


@pytest.mark.slow
def test_an_exported_model_loads_and_trains_on_with_keras_adam_where_the_trainer_is_absent(tmp_path: Path) -> None:
    from trainer.model import build_model, compile_model

    model = build_model("cnn", 32, 5)
    compile_model(model, 1e-3, steps_per_execution=1, jit_compile=False)
    images = np.random.default_rng(0).uniform(0, 255, (8, 32, 32, 3)).astype("float32")
    model.fit(images, np.arange(8) % 5, batch_size=4, verbose=0)
    model.save(str(tmp_path / "model"))

    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, numpy as np\n"
            "sys.modules['trainer'] = None  # a serving or fine-tuning machine without this project\n"
            "import tf_keras as keras\n"
            "model = keras.models.load_model(sys.argv[1])\n"
            "assert type(model.optimizer) is keras.optimizers.Adam, type(model.optimizer)\n"
            "assert abs(model.optimizer.learning_rate.numpy() - 1e-3) < 1e-9\n"
            "model.fit(np.zeros((4, 32, 32, 3), np.float32), np.zeros(4), verbose=0)\n"
            "print('TRAINED ON')",
            str(tmp_path / "model"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert "TRAINED ON" in loaded.stdout, loaded.stderr[-3000:]
