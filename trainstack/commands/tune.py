"""``trainstack tune``: hyperparameter tuning as AI Platform Training ran it, on the stack's queue.

    trainstack tune --stack S --spec hptuning_config.yaml [job options as `submit` takes them]
    trainstack tune --stack S --study NAME              # resume a study from the bucket alone
    trainstack tune status --stack S [--study NAME] [--chart FILE] [--json]

--spec takes AI Platform's ``trainingInput.hyperparameters`` as written (alone, or in a job
config such as a sample's hptuning_config.yaml). Each trial is a job on the stack's queue, named
<study>_t<N>, with the job's own arguments and then the trial's parameters as --NAME=VALUE (AI
Platform's convention), CLOUD_ML_TRIAL_ID=N in its environment and TF_CONFIG's task.trial, and
its own job directory.
Its metric is the spec's hyperparameterMetricTag, read from the cloudml-hypertune report or the
TensorFlow summaries in that directory; a trial whose code never wrote the tag fails, naming
the tags it did write. Suggestions and early stopping come from Optuna; the study's state is
trainstack/tune/<study>/study.json in the stack's bucket.

The command runs until the study ends (maxTrials trials ended, or more than maxFailedTrials
failed). Stopping it (Ctrl-C, a closed terminal, a lost machine) loses nothing: queued and
running trials go on on the stack's machines, and `tune` with the same spec, or with --study
alone, resumes the study where it is. The stack runs one job at a time on all its machines:
trials run one after another; maxParallelTrials is how many are queued or running at once.
"""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any

from trainstack.base.bucket import BucketError
from trainstack.commands.charts import chart_path, save_chart
from trainstack.commands.jobargs import add_job_arguments
from trainstack.commands.parsers import add_documented_command, number_argument, pattern_argument
from trainstack.commands.queueargs import add_queue_arguments, queue_place
from trainstack.commands.stackargs import add_stack_arguments, load_resolved, stack_option, stack_path
from trainstack.experiments.place import QueuePlace, QueueUsageError
from trainstack.experiments.submission import (
    BUILTIN_OPTIONS,
    CODE_OPTIONS,
    SubmitRefused,
    checked_job,
)
from trainstack_contract import METADATA_KEYS

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack.tuning.engine import TuneServices
    from trainstack.tuning.study import Study

# How often the study's trials are looked at: the time from a trial's end to the next one's
# queueing is at most this (a local cluster's is short: it is on this machine).
POLL_SECONDS = 5.0
LOCAL_POLL_SECONDS = 0.5
MIN_POLL, MAX_POLL = 0.1, 600.0


class Interrupted(Exception):
    """A termination signal reached `tune`."""


def _poll(text: str) -> float:
    value = number_argument(text, float, f"{text[:20]!r} is not a number of seconds")
    if not MIN_POLL <= value <= MAX_POLL:
        raise argparse.ArgumentTypeError(f"{text[:20]} seconds: from {MIN_POLL} to {MAX_POLL:g}")
    return value


def _study_name(text: str) -> str:
    from trainstack.tuning.study import STUDY_NAME

    return pattern_argument(
        text,
        STUDY_NAME,
        f"{text[:40]!r}: a study's name is a letter, then up to 63 letters, digits or '_' (its trials are "
        "jobs named <study>_t<N>)",
    )


def _local_options(args: argparse.Namespace) -> str:
    """--local and its --workdir, as the user gave them, for a command line a message suggests."""
    import shlex

    if not args.local:
        return ""
    return " --local" + (f" --workdir {shlex.quote(str(args.workdir))}" if args.workdir else "")


def _job_options_given(args: argparse.Namespace) -> list[str]:
    options = ["job_file", "name", "args", "args_replace", "env", "one_node", *BUILTIN_OPTIONS, *CODE_OPTIONS]
    return [f"--{key.replace('_', '-')}" for key in options if getattr(args, key, None)]


def _services(args: argparse.Namespace, stack: ResolvedStack, place: QueuePlace, code: list[Any]) -> TuneServices:
    from trainstack.experiments import waking
    from trainstack.experiments.studies import study_services

    woken: list[bool] = []

    def queued() -> None:
        if args.local:
            said = waking.wake_standing(place, stack, stack_option(args))
            if not woken:
                print(said)
        elif not woken and not args.no_start:
            waking.start_machines(stack)
        woken.append(True)

    return study_services(place, stack, code, queued, lambda line: print(line, flush=True))


def _open(args: argparse.Namespace) -> tuple[ResolvedStack, QueuePlace, Study, list[Any]]:
    """The stack, its queue and the study: opened from --spec and the job, or (--study without
    --spec) read back from the bucket."""
    from trainstack.experiments.studies import opened_study, resumed_study
    from trainstack.tuning.spec import read_spec

    if args.spec is None:
        if args.study is None:
            raise SubmitRefused(
                "give --spec FILE (AI Platform's hyperparameters) to start or resume a study, or --study NAME to resume one"
            )
        given = _job_options_given(args)
        if given:
            raise SubmitRefused(
                f"{', '.join(given)}: a study resumed by --study alone runs the job it was started with; give --spec too, or leave them out"
            )
        stack = load_resolved(args)
        place = queue_place(args, stack)
        study = resumed_study(place, stack, args.study)
        print(f"study {study.name} resumed: {len(study.trials)} trials recorded")
        return stack, place, study, []
    spec = read_spec(args.spec)
    stack, queued = checked_job(stack_path(args), None if args.stack_file else args.stack, args)
    place = queue_place(args, stack)
    study, created, values, code = opened_study(
        place, stack, queued, spec, str(args.spec), args.study, args.local, args.one_node
    )
    if created:
        print(f"study {study.name} started on stack {stack.stack}: {spec.max_trials} trials of {spec.algorithm}")
        shown = shlex.join(json.loads(values[METADATA_KEYS.trainer_args]))
        print(f"each trial's code gets (after --job-dir) {shown} and then the trial's parameters")
    else:
        print(f"study {study.name} resumed: {len(study.trials)} trials recorded")
    return stack, place, study, code


def _parallel_note(stack: ResolvedStack, study: Study) -> str | None:
    """What maxParallelTrials comes to on this stack's machines."""
    parallel = study.spec.parallel_trials
    machines = len(stack.cluster.nodes) if stack.cluster else 1
    if parallel <= 1:
        return None
    if study.one_node and machines > 1:
        at_once = min(parallel, machines)
        return (
            f"note: maxParallelTrials {parallel}: each trial runs on one of stack {stack.stack}'s {machines} "
            f"machines, so up to {at_once} run at once"
            + (f" and {parallel - at_once} more wait queued" if parallel > at_once else "")
            + "; each is chosen without the results of those still outstanding (as AI Platform's parallel trials were)"
        )
    hint = "" if study.one_node or machines == 1 else "; with --one-node each trial runs on one machine, side by side"
    return (
        f"note: maxParallelTrials {parallel}: stack {stack.stack} runs one job at a time on its {machines} "
        f"machine(s), so trials run one after another; up to {parallel} are queued at once, each chosen "
        f"without the results of those still outstanding (as AI Platform's parallel trials were){hint}"
    )


def cmd_tune(args: argparse.Namespace) -> int:
    from trainstack.localrun.wheels import FetchError
    from trainstack.localrun.workdir import WorkdirError
    from trainstack.tuning import engine
    from trainstack.tuning.report import print_study
    from trainstack.tuning.spec import SpecError

    if args.action == "status":
        given = [*_job_options_given(args), *(["--spec"] if args.spec else []), *(["--poll"] if args.poll else [])]
        if given:
            print(
                f"trainstack: tune status: {', '.join(given)}: these start or resume a study; status only reads it",
                file=sys.stderr,
            )
            return 2
        return cmd_status(args)
    if args.json or args.chart is not None:
        print("trainstack: tune: --json and --chart belong to `trainstack tune status`", file=sys.stderr)
        return 2
    try:
        stack, place, study, code = _open(args)
        note = _parallel_note(stack, study)
        if note:
            print(note)
        services = _services(args, stack, place, code)
        poll = args.poll or (LOCAL_POLL_SECONDS if args.local else POLL_SECONDS)
        try:
            with _SignalsInterrupt():
                study = engine.run(services, study.name, poll, time.sleep)
        except Interrupted:
            print(
                f"\ntune stopped: the study's queued and running trials go on on stack {stack.stack}; "
                f"`trainstack tune {stack_option(args)}{_local_options(args)} --study {study.name}` resumes it",
                file=sys.stderr,
            )
            return 130
    except SpecError as error:
        for problem in error.problems:
            print(f"trainstack: tune: {problem}", file=sys.stderr)
        return 1
    except WorkdirError as error:
        print(f"trainstack: tune: --workdir: {error}", file=sys.stderr)
        return 1
    except FetchError as error:
        print(f"trainstack: tune: {error}", file=sys.stderr)
        return 1
    except (SubmitRefused, QueueUsageError, BucketError, engine.StudyRefused) as error:
        for line in str(error).splitlines():
            print(f"trainstack: tune: {line}", file=sys.stderr)
        return 1
    print_study(study)
    from trainstack_contract.lifecycle import StudyState

    return 0 if study.state == StudyState.SUCCEEDED else 1


class _SignalsInterrupt:
    """SIGINT and SIGTERM end the command's loop as :class:`Interrupted` (the trials go on)."""

    def __enter__(self) -> None:
        def handler(number: int, frame: FrameType | None) -> None:
            raise Interrupted(signal.Signals(number).name)

        self.previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self.previous.items():
            signal.signal(sig, previous)


def cmd_status(args: argparse.Namespace) -> int:
    import json

    from trainstack.tuning.engine import StudyRefused, read_study
    from trainstack.tuning.report import print_study, study_json, write_chart
    from trainstack.tuning.study import study_names

    stack = load_resolved(args)
    try:
        place = queue_place(args, stack)
        name = args.study
        if name is None:
            names = study_names(place.bucket)
            if len(names) != 1:
                known = ", ".join(names) or "none"
                print(
                    f"trainstack: tune status: give --study NAME (studies on stack {stack.stack}: {known})",
                    file=sys.stderr,
                )
                return 1
            name = names[0]
        study = read_study(place.bucket, name)
    except (QueueUsageError, BucketError, StudyRefused) as error:
        print(f"trainstack: tune status: {error}", file=sys.stderr)
        return 1
    if study is None:
        print(f"trainstack: tune status: no study {name} on stack {stack.stack}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(study_json(study), indent=2, sort_keys=True))
    else:
        print_study(study)
    if args.chart is not None and not save_chart(lambda path: write_chart(study, path), args.chart, not args.json):
        return 1
    return 0


def register(subparsers: Any) -> None:
    parser = add_documented_command(
        subparsers,
        "tune",
        __doc__,
        "hyperparameter tuning from AI Platform's hyperparameters spec: trials on the stack's queue",
    )
    parser.add_argument(
        "action",
        nargs="?",
        choices=("status",),
        help="status: every trial of the study (parameters, metric, state) and the best; without it, run the study",
    )
    add_stack_arguments(parser)
    parser.add_argument("--spec", type=Path, help="AI Platform's trainingInput.hyperparameters (YAML or JSON)")
    parser.add_argument(
        "--study",
        type=_study_name,
        help="the study's name (default: the job's name; for status, the stack's only study)",
    )
    add_job_arguments(parser)
    add_queue_arguments(parser)
    parser.add_argument(
        "--poll",
        type=_poll,
        metavar="SECONDS",
        help=f"how often trials are looked at (default {POLL_SECONDS:g}, {LOCAL_POLL_SECONDS:g} with --local)",
    )
    parser.add_argument("--no-start", action="store_true", help="queue trials only: do not start stopped machines")
    shown = parser.add_argument_group("tune status")
    shown.add_argument("--json", action="store_true", help="print the study as JSON")
    shown.add_argument(
        "--chart",
        type=chart_path,
        metavar="FILE",
        help="draw the metric per trial against each parameter (.png, .svg, .pdf)",
    )
    parser.set_defaults(func=cmd_tune)
