"""A rehearsal: a standing node's warm interpreter makes the next job's strategy and model
before the job arrives.

Between a standing cluster's whole-cluster jobs, the next one almost always has the same
cluster (TF_CONFIG's hosts, ports and this node's task) and, in a tuning study, the same model
with other hyperparameters. So once a job of the built-in trainer has ended, the agent hands the
warm interpreter that waits for the next job the ended job's command (trainstack_agent.warm),
and every node's warm interpreter, together, runs :func:`trainer.rehearsal.rehearse`: it
builds the strategy (the port is free again), decides the settings as a job would (the chief's sent to every node), builds
and compiles the model, and trains one execution of steps on synthetic images of the job's
shapes in a scratch directory, which traces and optimises the training step. The model's first
weights are kept; nothing the rehearsal does is written where a job's data lives.

When the job arrives, :func:`strategy_for` hands the trainer that strategy (only for the same
cluster and kind: MultiWorkerMirroredStrategy cannot be made twice in one process), and
:func:`take_model` the model, only if everything its variables and its traced step depend on
(:class:`ModelKey`) equals the job's: its weights set back to their first values, its
optimizer's state to zero and its learning rate to the job's, so that it trains exactly as a
model built afresh with the job's seed would (a test compares their losses). Anything else
builds as before.

What is prepared lives in a module of its own in ``sys.modules`` (``HOLDER``), not in this
one: the agent removes the rehearsal's modules of the job's code before the job runs, so the
job imports its own code, checked against its digest, and finds the prepared objects there.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import types
from collections.abc import Mapping
from typing import Any, NoReturn

from trainer.config import TrainerConfig
from trainer.strategy import StrategyError
from trainstack_contract import BUILTIN_MODULE
from trainstack_contract.tf_config import cluster_key

log = logging.getLogger(__name__)

# The module in sys.modules that keeps what a rehearsal prepared, across the job's own imports.
HOLDER = "trainstack_prepared"


@dataclasses.dataclass(frozen=True)
class ModelKey:
    """What a compiled model's variables and its traced training step depend on."""

    model: str
    image_size: int
    num_classes: int
    precision: str
    steps_per_execution: int
    xla: bool
    global_batch: int
    seed: int


@dataclasses.dataclass
class Prepared:
    """What a rehearsal made. Kept as plain values in the holder module (:func:`held`): the
    job's own import of this module defines its classes anew, which would equal none of the
    rehearsal's."""

    cluster: str
    kind: str
    strategy: Any
    # The same on every node that rehearsed together, and on no others (trainer.warm_agreement).
    token: str | None = None
    model_key: dict[str, Any] | None = None
    model: Any = None
    first_weights: list[Any] | None = None


def held() -> Prepared | None:
    holder = sys.modules.get(HOLDER)
    state = getattr(holder, "state", None)
    return Prepared(**state) if isinstance(state, dict) else None


def hold(prepared: Prepared) -> None:
    holder = sys.modules.get(HOLDER)
    if holder is None:
        holder = types.ModuleType(HOLDER, "What a rehearsal prepared for the next job (trainer.prepared).")
        sys.modules[HOLDER] = holder
    # Field by field: asdict would deep-copy the strategy and the model.
    state = {field.name: getattr(prepared, field.name) for field in dataclasses.fields(prepared)}
    holder.state = state  # type: ignore[attr-defined]


def rehearsal_token() -> str | None:
    """The token of the rehearsal this process holds; None where it holds none."""
    prepared = held()
    return prepared.token if prepared is not None else None


def start_anew() -> NoReturn:
    """Replaces this process, which holds a rehearsed strategy the job may not use, by a new
    interpreter running the same job (the same module, arguments and environment)."""
    log.info("the nodes start this job afresh: a new process replaces the rehearsed one")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # The same interpreter and module, with this job's own arguments: no shell reads them.
    os.execv(sys.executable, [sys.executable, "-m", BUILTIN_MODULE, *sys.argv[1:]])  # noqa: S606


def strategy_for(kind: str, environ: Mapping[str, str]) -> Any | None:
    """The strategy a rehearsal made, for a job of this kind on this cluster; None where none
    was made. A strategy made for another cluster or kind is a StrategyError: the process cannot
    make a second one (the agent hands such a job to a new process instead)."""
    prepared = held()
    if prepared is None:
        return None
    if prepared.kind != kind or prepared.cluster != cluster_key(environ.get("TF_CONFIG")):
        raise StrategyError(
            f"this process's strategy was made for a {prepared.kind} job on another cluster; "
            "start the trainer in a new process"
        )
    return prepared.strategy


def take_model(key: ModelKey, learning_rate: float) -> Any | None:
    """The rehearsal's model, if ``key`` is the one it was built with: set back to its first
    weights, its optimizer to zero, its learning rate to the job's. Taken once."""
    prepared = held()
    if prepared is None or prepared.model is None or prepared.model_key != dataclasses.asdict(key):
        if prepared is not None and prepared.model is not None:
            log.info("the rehearsed model does not fit this job's settings; building the job's own")
        return None
    import tensorflow as tf

    model, first = prepared.model, prepared.first_weights
    hold(dataclasses.replace(prepared, model=None, first_weights=None))
    model.set_weights(first)
    optimizer = model.optimizer
    for variable in optimizer.variables():
        variable.assign(tf.zeros_like(variable))
    optimizer.learning_rate = learning_rate
    log.info("the model was built and its training step traced before the job arrived")
    return model


def model_key(config: TrainerConfig, setup: Any) -> ModelKey:
    """The key of the model a job with these flags and settings (``training.TrainingSetup``)
    builds."""
    return ModelKey(
        model=config.model,
        image_size=config.image_size,
        num_classes=setup.source.num_classes,
        precision=setup.precision,
        steps_per_execution=setup.steps_per_execution,
        xla=setup.use_xla,
        global_batch=setup.global_batch,
        seed=config.seed,
    )
