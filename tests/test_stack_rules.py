"""The stack file's rules at their bounds, with the whole message a user reads.

Each rule is the plain function a validator of ``trainstack.stackmodel.schema`` hands its field
to; these tests call it directly, at the bound and one past it, and with a value that breaks one
condition alone. The cases came from mutants that survived the selection (docs/mutation.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from trainstack.stackmodel.schema import (
    CapacityChoice,
    Cluster,
    Job,
    Settings,
    check_args,
    check_bucket_name,
    check_data_source,
    check_env_apart_from_secrets,
    check_job_dir,
    check_job_env,
    check_labels,
    check_one_capacity,
    check_path_text,
    check_principals,
    check_run_time_cap,
    check_secrets_have_a_job,
    check_service_agent_role,
)
from trainstack.stackmodel.secrets import JobSecret, check_secret_names, engine_secrets


def refusal(rule: Callable[[Any], Any], value: Any) -> str:
    with pytest.raises(ValueError, match=r"\S") as caught:  # the whole message is compared by each caller
        rule(value)
    return str(caught.value)


PATH_WORDS = "is not a path: printable text of at most 4096 characters"


def test_a_path_is_printable_text_of_one_to_4096_characters() -> None:
    assert check_path_text("teams/acme") == "teams/acme"
    assert check_path_text("p" * 4096) == "p" * 4096
    assert refusal(check_path_text, "") == f"'' {PATH_WORDS}"
    assert PATH_WORDS in refusal(check_path_text, "p" * 4097)
    # Short and not empty: only the unprintable character is wrong.
    assert refusal(check_path_text, "teams/\tacme") == f"'teams/\\tacme' {PATH_WORDS}"


ARG_WORDS = "each argument is printable text of at most 4096 characters"


def test_each_argument_is_printable_and_at_most_4096_characters() -> None:
    assert check_args(["--lr", "0.1"]) == ["--lr", "0.1"]
    assert check_args(["a" * 4096]) == ["a" * 4096]
    assert refusal(check_args, ["--ok", "a" * 4097]).endswith(f": {ARG_WORDS}")
    assert refusal(check_args, ["--note", "two\nlines"]) == f"'two\\nlines': {ARG_WORDS}"


def test_the_arguments_together_are_at_most_32768_characters() -> None:
    at_the_bound = ["a" * 4096] * 8
    assert check_args(at_the_bound) == at_the_bound
    assert refusal(check_args, [*at_the_bound, "b"]) == "the arguments add up to more than 32768 characters"


def test_a_bucket_name_follows_cloud_storages_rules_and_says_which_it_broke() -> None:
    assert check_bucket_name("acme-ml_data") == "acme-ml_data"
    assert (
        refusal(check_bucket_name, "Acme") == "'Acme' is not a bucket name: 3-63 lowercase letters, digits, '-' and '_'"
    )
    words = "is not a bucket name Cloud Storage allows: none begins with goog or holds google"
    assert refusal(check_bucket_name, "googdata") == f"googdata {words}"
    assert refusal(check_bucket_name, "acme-google-data") == f"acme-google-data {words}"


def test_access_members_are_principals_each_listed_once() -> None:
    members = ["user:ada@example.com", "group:ml@example.com", "serviceAccount:ci@p.iam.gserviceaccount.com"]
    assert check_principals(members) == members
    assert refusal(check_principals, ["ada@example.com"]) == (
        "'ada@example.com' is not an IAM principal: user:EMAIL, group:EMAIL or serviceAccount:EMAIL"
    )
    # Each listed exactly twice, in no order: both are named, sorted.
    twice = ["user:b@example.com", "user:a@example.com", "user:b@example.com", "user:a@example.com"]
    assert refusal(check_principals, twice) == "listed more than once: user:a@example.com, user:b@example.com"


def test_the_tpu_service_agent_takes_a_service_agent_role_alone() -> None:
    assert check_service_agent_role("roles/ml.serviceAgent") == "roles/ml.serviceAgent"
    assert refusal(check_service_agent_role, "roles/owner") == (
        "the Cloud TPU service agent may be granted only a service-agent role: "
        "roles/tpu.serviceAgent, roles/ml.serviceAgent"
    )


def test_job_env_is_a_mapping_of_at_most_64_variables() -> None:
    assert refusal(check_job_env, ["A=1"]) == "a mapping of NAME: \"value\" (got ['A=1'])"
    at_the_bound = {f"V{number}": "x" for number in range(64)}
    assert check_job_env(at_the_bound) == at_the_bound
    assert refusal(check_job_env, {**at_the_bound, "V64": "x"}) == "65 variables: at most 64"


def test_a_job_env_problem_quotes_a_bad_name_and_names_a_good_one_as_it_is() -> None:
    assert refusal(check_job_env, {"1ST": "x"}) == (
        "'1ST': a name is letters, digits and '_', not starting with a digit, at most 128 characters"
    )
    reserved = refusal(check_job_env, {"LD_PRELOAD": "/tmp/x.so"})
    assert reserved.startswith("LD_PRELOAD is set by trainstack, Vertex AI or the system")
    assert "(reserved: BASH_ENV, CLOUD_ML_HP_METRIC_FILE, CLUSTER_SPEC, ENV, HOME, " in reserved
    assert (
        "and names starting AIP_, TRAINSTACK_, CLOUDSDK_, GCE_METADATA_, LD_, NVIDIA_, PYTHON but PYTHONDONTWRITEBYTECODE, "
        in reserved
    )


def test_a_job_env_value_is_text_of_at_most_4096_printable_characters() -> None:
    assert check_job_env({"NOTE": "n" * 4096}) == {"NOTE": "n" * 4096}
    words = "NOTE: a value is printable text of at most 4096 characters, on one line"
    assert refusal(check_job_env, {"NOTE": "n" * 4097}) == words
    assert refusal(check_job_env, {"EPOCHS": 5}) == (
        'EPOCHS: 5 is not text to YAML; environment values are text: write "5"'
    )


def _env_written_as(length: int) -> dict[str, str]:
    """Variables whose JSON, as the rule measures it, is ``length`` characters long."""
    env = {f"V{number}": "x" * 3700 for number in range(9)}
    short = len(json.dumps(env)) - length
    env["V8"] = "x" * (3700 - short)
    assert len(json.dumps(env)) == length
    return env


def test_job_env_adds_up_to_at_most_32768_characters_as_written() -> None:
    assert check_job_env(_env_written_as(32768)) is not None
    assert refusal(check_job_env, _env_written_as(32769)) == "the variables add up to more than 32768 characters"


def test_a_job_dir_is_a_folder_of_a_bucket_outside_what_machines_run() -> None:
    assert check_job_dir("gs://acme_ml/experiments/1/") == "gs://acme_ml/experiments/1"
    assert refusal(check_job_dir, "gs://acme_ml") == (
        "'gs://acme_ml' is not a job directory: use gs://BUCKET/PREFIX, a folder (not the bucket's root: the "
        "nodes may write under it alone) of folder names of letters, digits and '._=-'; or leave it out for "
        "jobs/<name> in the stack's own bucket"
    )
    executed = (
        "lies under trainstack/, where trainstack keeps what machines run (in any bucket: only `pulumi up` may "
        "write there); use a folder outside trainstack/ of a bucket of the team's own"
    )
    assert refusal(check_job_dir, "gs://acme_ml/trainstack/code") == f"'gs://acme_ml/trainstack/code' {executed}"
    assert refusal(check_job_dir, "gs://acme_ml/trainstack/") == f"'gs://acme_ml/trainstack/' {executed}"
    assert check_job_dir("gs://acme_ml/trainstackx") == "gs://acme_ml/trainstackx"


def test_data_is_synthetic_or_a_cloud_storage_uri() -> None:
    assert check_data_source("synthetic") == "synthetic"
    assert check_data_source("gs://acme_ml/flowers") == "gs://acme_ml/flowers"
    assert refusal(check_data_source, "ftp://mirror/flowers") == (
        "'ftp://mirror/flowers' is not a data source: use 'synthetic' or a gs://BUCKET/PATH readable by the "
        "training service account"
    )


def test_a_stack_sets_at_most_62_labels_of_its_own_each_named_in_its_refusal() -> None:
    at_the_bound = {f"l{number}": "v" for number in range(62)}
    assert check_labels(at_the_bound) == at_the_bound
    assert refusal(check_labels, {**at_the_bound, "l62": "v"}) == (
        "63 labels: Google Cloud allows 64 per resource and trainstack sets 2, so at most 62"
    )
    assert refusal(check_labels, {"Team": "ml"}) == (
        "label key 'Team': lowercase letters, digits, '_' and '-', starting with a letter, at most 63 characters"
    )
    assert refusal(check_labels, {"trainstack-stack": "x"}) == (
        "label key trainstack-stack: keys starting with 'trainstack-' are set by trainstack"
    )
    assert refusal(check_labels, {"team": "ML Research"}) == (
        "label team='ML Research': values are lowercase letters, digits, '_' and '-', at most 63 characters"
    )


def test_no_run_time_cap_takes_the_acknowledgement_and_the_acknowledgement_takes_no_cap() -> None:
    check_run_time_cap(None, acknowledged=True)
    check_run_time_cap(24, acknowledged=False)
    assert refusal(lambda hours: check_run_time_cap(hours, acknowledged=False), None) == (
        "max_run_hours: null turns off the run-time cap, and the machines then bill until someone stops them "
        "(pulumi destroy); say so with acknowledge_bills_until_stopped: true, or set max_run_hours"
    )
    assert refusal(lambda hours: check_run_time_cap(hours, acknowledged=True), 5.0) == (
        "acknowledge_bills_until_stopped: true, but max_run_hours is 5.0: the cap stays on; remove the "
        "acknowledgement, or set max_run_hours: null"
    )


def _capacity(**fields: Any) -> CapacityChoice:
    return CapacityChoice.model_construct(**{"spot": False, "capacity": None, "reservation": None, **fields})


def test_a_machine_is_got_one_way_and_a_reservation_name_only_with_capacity_reservation() -> None:
    check_one_capacity(_capacity(spot=True, capacity="spot"))
    check_one_capacity(_capacity(capacity="reservation", reservation="team-a100"))
    assert refusal(check_one_capacity, _capacity(spot=True, capacity="on_demand")) == (
        "spot: true and capacity: on_demand name two ways to get the machine; keep one "
        "(capacity: one of on_demand, spot, flex_start, reservation)"
    )
    assert refusal(check_one_capacity, _capacity(capacity="spot", reservation="team-a100")) == (
        "reservation: team-a100 names a reservation to consume, which only capacity: reservation does "
        "(capacity is spot)"
    )


def test_secrets_need_a_job_on_machines_and_stay_out_of_job_env() -> None:
    secrets = {name: JobSecret(None) for name in ("WANDB_API_KEY", "HF_TOKEN")}
    job = Job.model_construct(env={"HF_TOKEN": "x", "WANDB_API_KEY": "y", "SEED": "1"})
    cluster = Cluster.model_construct()

    assert refusal(check_secrets_have_a_job, Settings.model_construct(secrets=secrets, job=None)) == (
        "trainstack:secrets are handed to a job on the cluster or TPU VM, and this stack runs none"
    )
    check_secrets_have_a_job(Settings.model_construct(secrets=secrets, job=job, cluster=cluster, tpu=None))
    assert refusal(check_env_apart_from_secrets, Settings.model_construct(secrets=secrets, job=job)) == (
        "job.env sets HF_TOKEN, WANDB_API_KEY, which trainstack:secrets sets too; a secret stays in "
        "trainstack:secrets alone"
    )


def test_a_stack_holds_at_most_20_secrets() -> None:
    at_the_bound = {f"TOKEN_{number}": JobSecret(None) for number in range(20)}
    assert check_secret_names(at_the_bound) == at_the_bound
    assert refusal(check_secret_names, {**at_the_bound, "TOKEN_20": JobSecret(None)}) == "21 secrets: at most 20"


def test_the_engines_decrypted_secrets_are_wrapped_up_to_64_kib_and_anything_else_left_for_the_schema() -> None:
    wrapped = engine_secrets({"HF_TOKEN": "t" * 65536, "BIG": "b" * 65537, "NUMBER": 5})

    assert isinstance(wrapped["HF_TOKEN"], JobSecret)
    assert wrapped["HF_TOKEN"].value == "t" * 65536
    # Left as they came, for the schema to refuse with its own message.
    assert wrapped["BIG"] == "b" * 65537
    assert wrapped["NUMBER"] == 5
    assert engine_secrets("not a mapping") == "not a mapping"
