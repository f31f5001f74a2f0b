"""A stack's jobs as `jobs` lists them: the stack's own (job 0), then the queue's, each with its
state, times, nodes, cost and final metric (a tuning trial's as its study read it)."""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from trainstack.experiments.place import QueuePlace, stack_job_objects

if TYPE_CHECKING:
    from trainstack.jobqueue.history import JobRow
    from trainstack.stackmodel.resolved import ResolvedStack


def job_rows(place: QueuePlace, stack: ResolvedStack, limit: int) -> list[JobRow]:
    """One row per job: the stack's own (job 0), then the latest ``limit`` of the queue;
    BucketError when the queue cannot be read."""
    from trainstack.jobqueue.history import JobSource, job_row
    from trainstack.jobqueue.queue import job_prefix, read_index
    from trainstack.stackmodel.cost import node_hourly

    index = read_index(place.bucket)
    sources = []
    own = stack_job_objects(stack, place.bucket_dir)
    if own is not None and stack.job is not None:
        sources.append(JobSource(0, stack.job.name, *own))
    sources += [
        JobSource(entry.id, entry.name, place.bucket, job_prefix(entry), entry) for entry in index.entries[-limit:]
    ]
    prices, now = node_hourly(stack), time.time()
    return with_trial_metrics([job_row(source, prices, now) for source in sources], place.bucket)


def with_trial_metrics(rows: list[JobRow], store: Any) -> list[JobRow]:
    """``rows``, where a tuning trial's job reported no metric of its own (no hypertune report,
    no metrics.json) with the one its study read for it from its summaries."""
    from trainstack.base.bucket import BucketError
    from trainstack.tuning.engine import read_study
    from trainstack.tuning.study import StudyFormatError, study_of_trial_job

    studies: dict[str, Any] = {}
    result = []
    for row in rows:
        name = study_of_trial_job(row.name)
        if row.metric is None and name is not None and row.id > 0:
            if name not in studies:
                try:
                    studies[name] = read_study(store, name)
                except (StudyFormatError, BucketError):
                    # A study that cannot be read leaves the row as it is: `tune status` says why.
                    studies[name] = None
            study = studies[name]
            trial = next((t for t in study.trials if t.job_id == row.id), None) if study is not None else None
            if trial is not None and trial.metric is not None:
                row = dataclasses.replace(row, metric=(study.spec.hyperparameter_metric_tag, trial.metric))
        result.append(row)
    return result
