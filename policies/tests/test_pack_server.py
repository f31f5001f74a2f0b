"""The pack as the Pulumi engine meets it: `__main__.py` started as `pulumi preview --policy-pack`
starts it, answering the engine's own gRPC Analyzer calls on the port it prints.

No Pulumi CLI here, so the test speaks the engine's side of the protocol with the stubs that
ship in the pulumi package: GetAnalyzerInfo (what the engine lists), then Analyze on a broken
resource (what a preview runs for each resource)."""

from __future__ import annotations

import select
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from google.protobuf import empty_pb2, json_format, struct_pb2  # type: ignore[import-untyped]
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from trainstack_policies import PACK_NAME, POLICIES

PACK = Path(__file__).resolve().parent.parent
START_TIMEOUT_SECONDS = 60
CALL_TIMEOUT_SECONDS = 30


@pytest.fixture(scope="module")
def analyzer() -> Iterator[Any]:
    pack = subprocess.Popen(
        [sys.executable, "__main__.py"], cwd=PACK, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert pack.stdout is not None
        ready, _, _ = select.select([pack.stdout], [], [], START_TIMEOUT_SECONDS)
        assert ready, "the pack printed no port"
        port = int(pack.stdout.readline().strip())
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            yield analyzer_pb2_grpc.AnalyzerStub(channel)
    finally:
        pack.kill()
        pack.wait(timeout=30)


def test_the_engine_sees_every_policy_with_its_level(analyzer: Any) -> None:
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=CALL_TIMEOUT_SECONDS)
    assert info.name == PACK_NAME
    assert [p.name for p in info.policies] == [p.name for p in POLICIES]
    levels = {p.name: analyzer_pb2.EnforcementLevel.Name(p.enforcementLevel) for p in info.policies}
    assert levels["no-public-ip"] == "MANDATORY"
    assert levels["bucket-versioning"] == "ADVISORY"


def test_a_preview_of_a_vm_with_a_public_ip_is_refused(analyzer: Any) -> None:
    properties = struct_pb2.Struct()
    json_format.ParseDict(
        {
            "machineType": "n1-standard-8",
            "networkInterfaces": [{"subnetwork": "subnet-id", "accessConfigs": [{}]}],
            "serviceAccount": {"email": "team-train@p.iam.gserviceaccount.com", "scopes": ["cloud-platform"]},
            "shieldedInstanceConfig": {"enableSecureBoot": True, "enableVtpm": True, "enableIntegrityMonitoring": True},
            "metadata": {"enable-oslogin": "TRUE", "block-project-ssh-keys": "TRUE"},
            "scheduling": {"maxRunDuration": {"seconds": 3600}},
            "labels": {"trainstack-stack": "team"},
            "bootDisk": {"initializeParams": {"labels": {"trainstack-stack": "team"}}},
        },
        properties,
    )
    urn = "urn:pulumi:team::trainstack::gcp:compute/instance:Instance::team-cluster-chief"
    request = analyzer_pb2.AnalyzeRequest(
        type="gcp:compute/instance:Instance", properties=properties, urn=urn, name="team-cluster-chief"
    )
    response = analyzer.Analyze(request, timeout=CALL_TIMEOUT_SECONDS)
    found = [(d.policyName, analyzer_pb2.EnforcementLevel.Name(d.enforcementLevel)) for d in response.diagnostics]
    assert found == [("no-public-ip", "MANDATORY")]
    assert "accessConfigs" in response.diagnostics[0].message
