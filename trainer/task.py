"""Entry point: ``python -m trainer.task --job-dir DIR --data synthetic|PATH ...``.

Exit status: 0 when the job finished (also when a finished job is re-run, which
returns at once without training unless --overwrite), 75 (``EXIT_PEER_LOST``) when
TensorFlow reports a peer of the cluster lost, so that the node's boot script restarts
the trainer once the cluster is whole (it resumes from its backup), 2 for bad flags, an unusable
job directory, a bad TF_CONFIG or unreadable data (one line on stderr, on every
node, before any node waits for its peers; an example that fails to decode only
when training reaches it is reported the same way by the node that read it, and so is a
backup made with other settings than the flags ask for), 1 for
any other failure (traceback on stderr).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence

from trainer import kernels
from trainer.config import TrainerConfig, parse_args
from trainstack_contract import AUTO, EXIT_PEER_LOST, FINISHED, LAYOUT, SYNTHETIC_DATA

log = logging.getLogger("trainer")

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    print(f"trainer: error: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


def _missing_local_data(data: str) -> bool:
    """Answers for local paths before the multi-second TensorFlow import."""
    is_remote = "://" in data
    is_glob = any(character in data for character in "*?[")
    return data != SYNTHETIC_DATA and not is_remote and not is_glob and not os.path.exists(data)


def _locally_finished(job_dir: str) -> bool:
    """A finished local job is recognised without importing TensorFlow (gs:// needs it)."""
    if "://" in job_dir:
        return False
    try:
        with open(os.path.join(job_dir, LAYOUT.metrics), encoding="utf-8") as handle:
            return bool(json.load(handle).get("status") == FINISHED)
    except (OSError, ValueError, AttributeError):
        return False


def run(config: TrainerConfig) -> int:
    if not config.overwrite and _locally_finished(config.job_dir):
        log.info("%s holds a finished job; nothing to do (pass --overwrite to train again)", config.job_dir)
        return 0
    if _missing_local_data(config.data):
        return _fail(f"--data {config.data}: no such file or directory")
    # None of these import TensorFlow at module level.
    from trainer import jobdir, locations, roles, training
    from trainer.config import ConfigError
    from trainer.data import DataError, check_examples, describe_data
    from trainer.jobdir import JobLayout
    from trainer.strategy import StrategyError, choose_strategy, parse_tf_config
    from trainstack_contract import EVALUATOR, PS, WORKER

    layout = JobLayout.from_config(config)
    try:
        # Cheapest first. Only gs:// paths and TFRecord files import TensorFlow here, and
        # nothing here runs a TensorFlow op: MultiWorkerMirroredStrategy and --logical-cpus
        # must configure the runtime before the first one.
        cluster = parse_tf_config(os.environ)
        if config.strategy != AUTO:
            # An explicit request is checked against TF_CONFIG alone (the GPU count only
            # matters to auto), so a mismatch is reported without TensorFlow.
            choose_strategy(config.strategy, cluster, num_gpus=0, tpu=config.tpu)
        jobdir.check_job_dir(config)
        if locations.is_remote(layout.root):
            finished = jobdir.reach_remote(layout, config)
            if not config.overwrite and finished is not None:
                log.info("%s holds a finished job; nothing to do (pass --overwrite to train again)", layout.root)
                return 0
        source = describe_data(config)
        check_examples(config, source)
        if not locations.is_remote(layout.root):
            # After the data: bad data leaves no empty job directory behind.
            jobdir.create_local(config)
    except (ConfigError, DataError, StrategyError) as error:
        return _fail(str(error))

    try:
        if cluster.task_type == EVALUATOR:
            roles.run_evaluator(config, layout, source)
            return 0
        if cluster.num_ps > 0 and cluster.task_type in (WORKER, PS):
            roles.serve_until_finished(cluster, layout, config.overwrite)
            return 0
        outcome = training.run_training(config, cluster, layout, source)
    except (ConfigError, DataError, StrategyError) as error:
        # A file that does not decode shows only when training reaches it; a backup made with
        # other settings only once the strategy is up (trainer.job_settings).
        return _fail(str(error))
    except training.PeerLost as lost:
        record = lost.record
        print(
            f"trainer: a peer of the cluster was lost ({lost.reason}) after step {record.trained_to_step} of "
            f"the job; the backup reaches step {record.backed_up_to_step}, so "
            f"{record.trained_to_step - record.backed_up_to_step} steps will be trained again; exiting "
            f"{EXIT_PEER_LOST} so that the node restarts the trainer, which resumes from its backup",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_PEER_LOST
    except Exception as error:
        # Before fit: setting up the strategy or the model runs collectives too, and a peer
        # that is restarting (a new incarnation) or gone aborts them the same way.
        reason = training.peer_loss(error) if "tensorflow" in sys.modules else None
        if reason is None:
            raise
        print(
            f"trainer: a peer of the cluster was lost ({reason}) before training began; exiting "
            f"{EXIT_PEER_LOST} so that the node restarts the trainer once the cluster is whole",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_PEER_LOST
    training.finish(outcome, layout)
    metrics = outcome.metrics
    log.info(
        "done: loss=%s accuracy=%s examples/s=%s",
        _rounded(metrics["final_loss"], 4),
        _rounded(metrics["final_accuracy"], 4),
        _rounded(metrics["examples_per_second"], 1),
    )
    return 0


def _rounded(value: object, digits: int) -> object:
    """A figure for the log, rounded (metrics.json keeps it whole); anything else as it is."""
    return round(value, digits) if isinstance(value, float) else value


def main(argv: Sequence[str] | None = None) -> int:
    config = parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Checkpoint saves log one INFO line per shard callback; keep the logs readable.
    logging.getLogger("absl").setLevel(logging.WARNING)
    # MultiWorkerMirroredStrategy logs every all-reduce it builds at INFO.
    logging.getLogger("tensorflow").setLevel(logging.WARNING)
    kernels.prefer_onednn(os.environ)
    return run(config)


if __name__ == "__main__":
    sys.exit(main())
