"""A tuning study on a stack's queue: opened from its spec and the job (or read back to be
resumed), and the services its engine runs with (trials queued and cancelled on the queue,
the cluster woken as trials come)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trainstack.experiments.place import QueuePlace
from trainstack.experiments.submission import SubmitRefused, code_objects, fetch_for_local_nodes, spec_values

if TYPE_CHECKING:
    from trainstack.jobqueue.queue import CodeObject
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack.tuning.engine import TuneServices
    from trainstack.tuning.spec import HyperparameterSpec
    from trainstack.tuning.study import Study


def resumed_study(place: QueuePlace, stack: ResolvedStack, name: str) -> Study:
    """The study ``name`` read back from the stack's bucket; StudyRefused when there is none."""
    from trainstack.tuning.engine import StudyRefused, read_study

    study = read_study(place.bucket, name)
    if study is None:
        raise StudyRefused(f"no study {name} on stack {stack.stack}: start it with --spec FILE")
    return study


def opened_study(
    place: QueuePlace,
    stack: ResolvedStack,
    queued: ResolvedStack,
    spec: HyperparameterSpec,
    spec_source: str,
    name: str | None,
    local: bool,
    one_node: bool,
) -> tuple[Study, bool, dict[str, str], list[CodeObject]]:
    """The study of ``spec`` over ``queued``'s job, opened in the stack's bucket or taken up
    where it stands (the same spec and job): the study, whether it was made now, the trials'
    job values and their code objects. SubmitRefused for a job or name a study cannot run
    (``spec_source``: where the spec came from, for a parameter the job's flags reserve)."""
    from trainstack.localrun.workdir import claim_workdir
    from trainstack.stackmodel.resolved import one_node_refusal
    from trainstack.tuning.engine import open_study
    from trainstack.tuning.spec import reserved_parameter_problems
    from trainstack.tuning.study import STUDY_NAME
    from trainstack_contract.status import utc_now

    if not stack.runs_queue:
        raise SubmitRefused(
            f"stack {stack.stack} runs no queue: set trainstack:cluster.idle_minutes (or tpu.idle_minutes) and "
            "`pulumi up` first; trials are jobs on the queue"
        )
    job = queued.job
    assert job is not None
    reserved = reserved_parameter_problems(spec, job.reserved_flags)
    if reserved:
        raise SubmitRefused(f"{spec_source}: " + "; ".join(reserved))
    name = name or job.name
    if STUDY_NAME.fullmatch(name) is None:
        raise SubmitRefused(
            f"the job's name {name[:40]!r} is too long for a study's: give --study NAME (up to 64 characters)"
        )
    if place.workdir is not None:
        claim_workdir(place.workdir, stack.stack)
        fetch_for_local_nodes(queued, place.workdir)
    code = code_objects(queued)
    refusal = one_node_refusal(stack) if one_node else None
    if refusal is not None:
        raise SubmitRefused(refusal)
    values = spec_values(queued, local, one_node)
    study, created = open_study(place.bucket, name, spec, values, utc_now(), one_node=one_node)
    return study, created, values, code


def study_services(
    place: QueuePlace,
    stack: ResolvedStack,
    code: list[CodeObject],
    wake: Callable[[], None],
    log: Callable[[str], None],
) -> TuneServices:
    """What the study's engine runs with: its trials queued (with ``code``) and cancelled on the
    stack's queue, ``wake`` called as each is queued, ``log`` for its lines."""
    from trainstack.experiments.queueing import cancel_job, queue_entry
    from trainstack.jobqueue.queue import CancelRefused, read_index
    from trainstack.jobstate.report import node_names
    from trainstack.tuning.engine import TuneServices
    from trainstack_contract.status import utc_now

    def queue_trial(name: str, values: dict[str, str], submitted: str, one_node: bool) -> Any:
        return queue_entry(place, name, values, code, submitted, one_node)

    def cancel_trial(job_id: int) -> None:
        # CancelRefused: it has ended or was cancelled already: nothing runs.
        with contextlib.suppress(CancelRefused):
            cancel_job(place, job_id)

    return TuneServices(
        bucket=place.bucket,
        submit=queue_trial,
        cancel=cancel_trial,
        entries=lambda: {entry.id: entry for entry in read_index(place.bucket).entries},
        queued=wake,
        now=utc_now,
        log=log,
        chief=node_names(stack)[0],
    )
