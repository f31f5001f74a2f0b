"""The node agent's cloud: Google's on a VM, `trainstack local`'s stand-ins where the command
line's overrides (trainstack_contract.overrides) say so."""

from __future__ import annotations

from pathlib import Path

from trainstack_agent.endpoints import Endpoints, Host, from_environment
from trainstack_contract.overrides import LocalOverrides, variable


def test_on_a_vm_nothing_is_set_and_every_value_is_googles() -> None:
    assert from_environment({"PATH": "/usr/bin"}) == (Endpoints(), Host())
    assert LocalOverrides().to_environment() == {}


def test_what_the_command_line_writes_the_agent_reads() -> None:
    local = LocalOverrides(
        metadata_root="http://127.0.0.1:1/computeMetadata/v1",
        compute_api="http://127.0.0.1:2/compute/v1",
        storage_api="http://127.0.0.1:3",
        tpu_api="http://127.0.0.1:4/v2",
        secrets_api="http://127.0.0.1:5/v1",
        sts_api="http://127.0.0.1:6",
        state_dir="/tmp/node/state",
        profile_dir="/tmp/node/profile",
        self_stop_log="/tmp/run/self-stop.log",
        skip_registry_login=True,
        secrets_from_environment=True,
        pip_find_links="/tmp/run/wheels",
        job_as_agent_user=True,
    )
    environment = local.to_environment()
    assert all(name.startswith("TRAINSTACK_") for name in environment)
    assert LocalOverrides.from_environment(environment) == local
    endpoints, host = from_environment(environment)
    assert endpoints == Endpoints(
        metadata=str(local.metadata_root),
        compute=str(local.compute_api),
        storage=str(local.storage_api),
        tpu=str(local.tpu_api),
        secrets=str(local.secrets_api),
        sts=str(local.sts_api),
    )
    assert host == Host(
        state_dir=Path("/tmp/node/state"),
        profile_dir=Path("/tmp/node/profile"),
        self_stop_log=Path("/tmp/run/self-stop.log"),
        skip_registry_login=True,
        secrets_from_environment=True,
        pip_find_links=Path("/tmp/run/wheels"),
        job_as_agent_user=True,
    )


def test_one_variable_changes_its_own_value_alone_and_an_empty_one_none() -> None:
    endpoints, host = from_environment({variable("storage_api"): "http://127.0.0.1:9", variable("state_dir"): ""})
    assert endpoints == Endpoints(storage="http://127.0.0.1:9")
    assert host == Host()
