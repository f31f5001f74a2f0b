"""A rehearsal of the next job (:mod:`trainer.prepared` says what it prepares and how a job
takes it): run by a standing node's warm interpreter, every node of the cluster at once, once
the job before has ended (trainstack_agent.warm)."""

from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence

from trainer import checkpointing, data_pipeline, data_sources, job_settings, training
from trainer import strategy as strategies
from trainer.config import parse_args
from trainer.jobdir import JobLayout
from trainer.precision import MIXED_FLOAT16
from trainer.prepared import Prepared, held, hold, model_key
from trainstack_contract import (
    CHIEF,
    MIRRORED,
    MULTI_WORKER_MIRRORED,
    ONE_DEVICE,
    REHEARSAL_STRATEGY_MADE,
    SYNTHETIC_DATA,
    WORKER,
)
from trainstack_contract.tf_config import cluster_key

# Strategies a rehearsal prepares: a parameter-server cluster's workers make no strategy, and
# a TPU's is connected to its TPU system, which a rehearsal must not hold between jobs.
REHEARSED_KINDS = (MULTI_WORKER_MIRRORED, MIRRORED, ONE_DEVICE)


def rehearsal_token(setup: training.TrainingSetup) -> str:
    """A token every node of this rehearsal holds and no other rehearsal's: the chief's random
    numbers, sent to every node through the rehearsal's own strategy."""
    numbers = [secrets.randbits(62), secrets.randbits(62)]
    if setup.kind == MULTI_WORKER_MIRRORED:
        numbers = job_settings.broadcast_from_chief(setup.strategy, numbers, checkpointing.is_writer(setup.strategy))
    return "-".join(f"{number:016x}" for number in numbers)


def rehearse(argv: Sequence[str], report: Callable[[str], None] = lambda line: None) -> str:
    """Prepares for a job like the one ``argv`` (the built-in trainer's arguments) describes;
    returns what was prepared, for the agent's log. Run in the warm interpreter, every node of
    the cluster at once; ``report`` tells the agent once the strategy is made (the agent waits
    longer for a rehearsal that every node has joined)."""
    if held() is not None:
        return "prepared already"
    config = parse_args(list(argv))
    cluster = strategies.parse_tf_config(os.environ)
    import tensorflow as tf

    num_gpus = len(tf.config.list_physical_devices("GPU"))
    kind = strategies.choose_strategy(config.strategy, cluster, num_gpus, config.tpu, config.logical_cpus)
    if kind not in REHEARSED_KINDS or config.logical_cpus > 1 or cluster.task_type not in (None, CHIEF, WORKER):
        return f"nothing: a {kind} job is not rehearsed"
    began = time.monotonic()
    scratch = tempfile.mkdtemp(prefix="trainstack-rehearsal-")
    try:
        # The job's shapes on synthetic images: the rehearsal reads none of the job's data
        # and writes only here.
        rehearsal = dataclasses.replace(config, data=SYNTHETIC_DATA, job_dir=scratch, overwrite=True)
        layout = JobLayout.from_config(rehearsal)
        source = data_sources.describe_data(rehearsal)
        setup = training.set_up(
            rehearsal, cluster, source, layout, rehearsing=True, strategy_made=lambda: report(REHEARSAL_STRATEGY_MADE)
        )
        made = time.monotonic()
        token = rehearsal_token(setup)
        hold(Prepared(cluster_key(os.environ.get("TF_CONFIG")), setup.kind, setup.strategy, token))
        if setup.precision == MIXED_FLOAT16:
            # Its loss scale (the scale and its count of good steps) moves in the rehearsal's
            # step and is no optimizer variable take_model sets back: the job builds its own.
            return f"a {setup.kind} strategy ({made - began:.1f} s); no model, which mixed_float16 builds anew"
        with setup.strategy.scope():
            model = training.build_and_compile(rehearsal, setup.source, setup.steps_per_execution, setup.use_xla)
        first = model.get_weights()
        import tf_keras as keras

        make_input = data_pipeline.make_input_fn(rehearsal, setup.source, setup.steps, training=True)
        inputs = keras.utils.experimental.DatasetCreator(make_input, input_options=training.device_prefetch(False))
        model.fit(inputs, epochs=1, steps_per_epoch=setup.steps_per_execution, verbose=0)
        key = dataclasses.asdict(model_key(rehearsal, setup))
        hold(Prepared(cluster_key(os.environ.get("TF_CONFIG")), setup.kind, setup.strategy, token, key, model, first))
        ended = time.monotonic()
        return (
            f"a {setup.kind} strategy ({made - began:.1f} s) and the {config.model} model, its step traced "
            f"({ended - made:.1f} s)"
        )
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
