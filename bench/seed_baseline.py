"""BASELINE FOR THE BENCHMARK ONLY - a re-implementation of the Vertex AI flowers lab's training.

Not part of the product. ``bench/trainer_throughput.py`` runs this next to our
trainer to measure what the trainer gains. It reproduces, in this project's own
code, what the lab's ``trainer/task.py`` does (its network is the CNN of
https://www.tensorflow.org/tutorials/images/classification):

* ``tf.distribute.MirroredStrategy()`` whatever the machine;
* the input pipeline: batches of float32 images, then ``cache()``,
  ``shuffle(1000)`` and ``prefetch(AUTOTUNE)``, batched by the per-replica
  ``BATCH_SIZE`` (the lab computes the global batch and never uses it);
* the network with its Resizing and Rescaling layers and a softmax Dense head;
* a plain ``model.fit(dataset, epochs=...)`` with Adam and default settings.

Two deliberate differences keep the comparison about training speed: the images
are the trainer's synthetic ones (the same pixels both runs see), and
``validation_data`` is left out of ``fit`` - the benchmark evaluates both models
on the same held-out images afterwards, outside the timed part. Validating every
epoch as the lab does would only make the baseline slower.

The lab ran on TensorFlow 2.8, where ``tf.keras`` is Keras 2; tf-keras is that
same Keras line today, so the baseline uses it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SEED_SHUFFLE_BUFFER = 1000
NUM_CLASSES = 5


def build_seed_model(image_size: int) -> Any:
    import tf_keras as keras

    layers = keras.layers
    # The same layers as trainer/model.py's CNN, copied on purpose: the baseline keeps the
    # lab's Resizing layer and float32 softmax, which the trainer drops for speed.
    return keras.Sequential(
        [
            keras.Input(shape=(image_size, image_size, 3)),
            layers.Resizing(image_size, image_size),
            layers.Rescaling(1.0 / 255),
            layers.Conv2D(16, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Flatten(),
            layers.Dense(128, activation="relu"),
            layers.Dense(NUM_CLASSES, activation="softmax"),
        ]
    )


def build_seed_resnet50(image_size: int) -> Any:
    """Seed 002's network: Keras' ResNet50 as the blog builds it inside ``strategy.scope()``
    (``weights=None``, its own softmax head), in float32, compiled with Adam."""
    import tf_keras as keras

    return keras.applications.ResNet50(weights=None, input_shape=(image_size, image_size, 3), classes=NUM_CLASSES)


SEED_MODELS = {"cnn": build_seed_model, "resnet50": build_seed_resnet50}


def run(
    image_size: int, batch_size: int, steps_per_epoch: int, epochs: int, seed: int, model_name: str = "cnn"
) -> dict[str, Any]:
    import tensorflow as tf
    import tf_keras as keras

    from trainer.kernels import onednn_enabled
    from trainer.synthetic_images import SYNTHETIC_EVAL_EXAMPLES, SYNTHETIC_EVAL_OFFSET, synthetic_examples

    keras.utils.set_random_seed(seed)
    strategy = tf.distribute.MirroredStrategy()

    def as_float(images: tf.Tensor, labels: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        # image_dataset_from_directory hands out float32 pixels in [0, 255].
        return tf.cast(images, tf.float32), labels

    # One epoch's worth of the same synthetic images our trainer draws from.
    train = (
        synthetic_examples(0, steps_per_epoch * batch_size, image_size, NUM_CLASSES, seed)
        .batch(batch_size)
        .map(as_float)
    )
    train = train.cache().shuffle(SEED_SHUFFLE_BUFFER).prefetch(buffer_size=tf.data.AUTOTUNE)

    with strategy.scope():
        model = SEED_MODELS[model_name](image_size)
        model.compile(
            optimizer=keras.optimizers.Adam(), loss=keras.losses.SparseCategoricalCrossentropy(), metrics=["accuracy"]
        )

    epoch_seconds: list[float] = []

    class EpochTimer(keras.callbacks.Callback):  # type: ignore[misc]  # tf-keras is untyped
        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.started = time.perf_counter()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            epoch_seconds.append(time.perf_counter() - self.started)

    history = model.fit(train, epochs=epochs, callbacks=[EpochTimer()], verbose=2)

    evaluation = (
        synthetic_examples(SYNTHETIC_EVAL_OFFSET, SYNTHETIC_EVAL_EXAMPLES, image_size, NUM_CLASSES, seed)
        .batch(batch_size)
        .map(as_float)
    )
    eval_loss, eval_accuracy = model.evaluate(evaluation, verbose=0)

    examples_per_epoch = steps_per_epoch * batch_size
    steady = epoch_seconds[1:] if len(epoch_seconds) > 1 else epoch_seconds
    return {
        "examples_per_second": examples_per_epoch * len(steady) / sum(steady),
        "examples_per_second_all_epochs": examples_per_epoch * epochs / sum(epoch_seconds),
        "train_seconds": sum(epoch_seconds),
        "final_loss": float(history.history["loss"][-1]),
        "final_accuracy": float(history.history["accuracy"][-1]),
        "eval_loss": float(eval_loss),
        "eval_accuracy": float(eval_accuracy),
        "replicas": strategy.num_replicas_in_sync,
        # Reported, not set: the seed runs with whatever TensorFlow chooses on this CPU.
        "onednn": onednn_enabled(),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image-size", type=int, default=180)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--steps-per-epoch", type=int, default=50)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument(
        "--model", choices=sorted(SEED_MODELS), default="cnn", help="cnn: seed 004's lab; resnet50: seed 002's"
    )
    parser.add_argument("--output", type=Path, required=True, help="where to write the JSON result")
    args = parser.parse_args()
    result = run(args.image_size, args.batch_size, args.steps_per_epoch, args.epochs, args.seed, args.model)
    args.output.write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
