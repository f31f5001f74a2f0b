"""A team's own training code, run by trainstack as ``python -m tabular_mlp.task``.

It is not the built-in trainer: its own model (a small classifier of tabular features),
its own flags, its own data. What it does to run on any trainstack cluster:

- the strategy reads TF_CONFIG itself (``MultiWorkerMirroredStrategy()`` through its
  cluster resolver); without TF_CONFIG one machine trains with ``MirroredStrategy``;
- it resumes its own work: ``BackupAndRestore`` keeps the training state under the job
  directory (``$AIP_CHECKPOINT_DIR``, set by trainstack as by Vertex AI), so when a node is
  preempted and trainstack starts this code again, training resumes from the last backup
  instead of epoch 0; it needs nothing else from trainstack (no exit code, no signal);
- the chief alone writes the model and the summary; the other workers save to scratch
  paths they delete, because saving under MultiWorkerMirroredStrategy is collective.
"""

from __future__ import annotations

import argparse
import json
import os
import posixpath
import sys

# Keras 3 cannot train under MultiWorkerMirroredStrategy (keras-team/keras#20585): tf-keras.
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import tensorflow as tf
import tf_keras as keras

SUMMARY = "summary.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    # allow_abbrev=False: only the whole --job-dir is the job directory trainstack passes.
    parser = argparse.ArgumentParser(
        prog="python -m tabular_mlp.task", description=__doc__.splitlines()[0], allow_abbrev=False
    )
    parser.add_argument("--job-dir", required=True, help="where checkpoints, the model and the summary go")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--steps-per-epoch", type=int, default=20)
    parser.add_argument("--batch-size-per-replica", type=int, default=32)
    parser.add_argument("--features", type=int, default=16)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    for name in ("epochs", "steps_per_epoch", "batch_size_per_replica", "features"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def tf_config() -> dict:
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def choose_strategy() -> tf.distribute.Strategy:
    if tf_config().get("cluster"):
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.MirroredStrategy()


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    resolver = getattr(strategy, "cluster_resolver", None)
    task_type = getattr(resolver, "task_type", None)
    task_id = getattr(resolver, "task_id", 0)
    cluster = tf_config().get("cluster", {})
    # The chief, or worker 0 of a cluster without one, or a single machine.
    return task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and "chief" not in cluster)


def dataset(features: int, global_batch: int, seed: int) -> tf.data.Dataset:
    """Separable synthetic rows: the label is the sign of a fixed projection of the features."""
    generator = tf.random.Generator.from_seed(seed)
    x = generator.normal((4096, features))
    direction = generator.normal((features, 1))
    y = tf.cast(tf.squeeze(x @ direction, axis=1) > 0, tf.int32)
    data = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(4096, seed=seed).repeat().batch(global_batch)
    options = tf.data.Options()
    # Every worker reads the same generated rows; sharding by data splits each batch.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return data.with_options(options)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    job_dir = args.job_dir.rstrip("/")
    strategy = choose_strategy()
    chief = is_chief(strategy)
    global_batch = args.batch_size_per_replica * strategy.num_replicas_in_sync
    with strategy.scope():
        model = keras.Sequential(
            [keras.Input((args.features,)), keras.layers.Dense(32, activation="relu"), keras.layers.Dense(2)]
        )
        model.compile(
            optimizer=keras.optimizers.Adam(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            metrics=["accuracy"],
        )
    checkpoints = os.environ.get("AIP_CHECKPOINT_DIR") or posixpath.join(job_dir, "checkpoints")
    first_epoch: list[int] = []
    history = model.fit(
        dataset(args.features, global_batch, args.seed),
        epochs=args.epochs,
        steps_per_epoch=args.steps_per_epoch,
        callbacks=[
            # TensorFlow's own fault tolerance: back up at every epoch's end, restore on start.
            keras.callbacks.BackupAndRestore(backup_dir=checkpoints),
            # Where this run started: after a restore, the epoch the backup reached.
            keras.callbacks.LambdaCallback(on_epoch_begin=lambda epoch, logs: first_epoch.append(int(epoch))),
        ],
        verbose=2,
    )
    model_dir = os.environ.get("AIP_MODEL_DIR") or posixpath.join(job_dir, "model")
    resolver = getattr(strategy, "cluster_resolver", None)
    scratch = posixpath.join(
        job_dir, "tmp", f"{getattr(resolver, 'task_type', 'worker')}-{getattr(resolver, 'task_id', 0)}"
    )
    model.save(model_dir if chief else scratch)
    if not chief:
        tf.io.gfile.rmtree(scratch)
        return 0
    summary = {
        "replicas": strategy.num_replicas_in_sync,
        "strategy": type(strategy).__name__,
        "epochs": len(history.history.get("loss", [])),
        # Epochs an earlier, interrupted run had completed, restored from the backup.
        "epochs_resumed": first_epoch[0] if first_epoch else args.epochs,
        "accuracy": float(history.history["accuracy"][-1]) if history.history.get("accuracy") else None,
    }
    with tf.io.gfile.GFile(posixpath.join(job_dir, SUMMARY), "w") as out:
        out.write(json.dumps(summary, indent=2) + "\n")
    print(f"tabular_mlp: {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
