"""A private network: no public IPs, egress through Cloud NAT, SSH only through IAP."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pulumi
import pulumi_gcp as gcp

if TYPE_CHECKING:
    from trainstack.stackmodel.resolved import ResolvedStack
    from trainstack.stackmodel.schema import ExistingNetwork

# Google's IAP TCP forwarding range: `gcloud compute ssh --tunnel-through-iap` arrives from here.
IAP_SOURCE_RANGE = "35.235.240.0/20"
SUBNET_RANGE = "10.20.0.0/20"


@dataclass(frozen=True)
class PrivateNetworkArgs:
    project: str
    region: str
    # IAP SSH reaches the machines running as these accounts.
    ssh_service_accounts: list[pulumi.Input[str]]
    # The training port opens only between machines running as this account (None: no port).
    training_service_account: pulumi.Input[str] | None
    training_port: int | None


class PrivateNetwork(pulumi.ComponentResource):
    network: gcp.compute.Network
    subnetwork: gcp.compute.Subnetwork
    nat: gcp.compute.RouterNat

    def __init__(self, name: str, args: PrivateNetworkArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("trainstack:index:PrivateNetwork", name, None, opts)
        project, region = args.project, args.region
        child = pulumi.ResourceOptions(parent=self)
        self.network = gcp.compute.Network(f"{name}-vpc", project=project, auto_create_subnetworks=False, opts=child)
        self.subnetwork = gcp.compute.Subnetwork(
            f"{name}-subnet",
            project=project,
            region=region,
            network=self.network.id,
            ip_cidr_range=SUBNET_RANGE,
            # Nodes without public IPs still reach Cloud Storage, Artifact Registry and Logging.
            private_ip_google_access=True,
            # VPC Flow Logs (CIS Google Cloud 3.8 in v4.0.0): who talked to the training nodes.
            # Sampled and aggregated, which keeps Cloud Logging's ingestion small.
            log_config=gcp.compute.SubnetworkLogConfigArgs(
                aggregation_interval="INTERVAL_10_MIN", flow_sampling=0.5, metadata="INCLUDE_ALL_METADATA"
            ),
            opts=child,
        )
        self.router = gcp.compute.Router(
            f"{name}-router", project=project, region=region, network=self.network.id, opts=child
        )
        self.nat = gcp.compute.RouterNat(
            f"{name}-nat",
            project=project,
            region=region,
            router=self.router.name,
            nat_ip_allocate_option="AUTO_ONLY",
            source_subnetwork_ip_ranges_to_nat="ALL_SUBNETWORKS_ALL_IP_RANGES",
            log_config=gcp.compute.RouterNatLogConfigArgs(enable=True, filter="ERRORS_ONLY"),
            opts=child,
        )
        self.firewalls = stack_firewall(name, project, self.network.id, args, child)
        self.network_id: pulumi.Input[str] = self.network.id
        self.subnetwork_id: pulumi.Input[str] = self.subnetwork.id
        # Machines reach the package index and Google's APIs once Cloud NAT is up.
        self.egress: list[pulumi.Resource] = [self.nat]
        self.register_outputs({"network": self.network.self_link, "subnetwork": self.subnetwork.self_link})


class JoinedNetwork(pulumi.ComponentResource):
    """A network the stack joins (a Shared VPC's subnetwork, trainstack:network): it creates no
    network, subnetwork, router or Cloud NAT; with ``firewall: stack`` its IAP and training-port
    rules go in the network's project, with ``firewall: host`` none (the host's admins keep them:
    :func:`host_firewall_rules` says which)."""

    def __init__(
        self,
        name: str,
        args: PrivateNetworkArgs,
        joined: ExistingNetwork,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        super().__init__("trainstack:index:JoinedNetwork", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.network_id = joined.network
        self.subnetwork_id = joined.subnetwork
        self.firewalls = (
            stack_firewall(name, joined.host_project, joined.network, args, child) if joined.firewall == "stack" else []
        )
        # Egress is the host's (its Cloud NAT, or Private Google Access): nothing of the stack's.
        self.egress: list[pulumi.Resource] = list(self.firewalls)
        self.register_outputs({"network": joined.network, "subnetwork": joined.subnetwork})


def stack_firewall(
    name: str,
    project: str,
    network: pulumi.Input[str],
    args: PrivateNetworkArgs,
    opts: pulumi.ResourceOptions,
) -> list[gcp.compute.Firewall]:
    """IAP SSH to every machine of the stack and, with a TF_CONFIG cluster, TensorFlow's gRPC
    port between its training VMs alone (not the notebook's or the TPU's)."""
    rules = [_ingress(f"{name}-iap-ssh", project, network, 22, args.ssh_service_accounts, opts, [IAP_SOURCE_RANGE])]
    if args.training_port is not None and args.training_service_account is not None:
        account = args.training_service_account
        rules.append(
            _ingress(f"{name}-training", project, network, args.training_port, [account], opts, None, [account])
        )
    return rules


def _ingress(
    resource_name: str,
    project: str,
    network: pulumi.Input[str],
    port: int,
    targets: list[pulumi.Input[str]],
    opts: pulumi.ResourceOptions,
    source_ranges: list[str] | None = None,
    source_service_accounts: list[pulumi.Input[str]] | None = None,
) -> gcp.compute.Firewall:
    """A rule that lets TCP to ``port`` in, to the machines running as ``targets``, from the
    sources named (IP ranges or service accounts)."""
    return gcp.compute.Firewall(
        resource_name,
        project=project,
        network=network,
        direction="INGRESS",
        source_ranges=source_ranges,
        source_service_accounts=source_service_accounts,
        target_service_accounts=targets,
        allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(port)])],
        opts=opts,
    )


def host_firewall_rules(stack: ResolvedStack) -> list[str]:
    """With ``firewall: host``, the ingress rules the host's admins must have on the network for
    the stack to work, in words (targets by the stack's service accounts)."""
    joined = stack.network
    if joined is None or joined.firewall != "host":
        return []
    accounts = sorted(stack.machine_accounts)
    rules = [
        f"allow tcp:22 from {IAP_SOURCE_RANGE} (IAP) to the machines running as {', '.join(accounts)}",
    ]
    if stack.cluster is not None and stack.cluster.tf_cluster:
        training = stack.training_account_email
        rules.append(
            f"allow tcp:{stack.cluster.port} from {training} to {training} (TensorFlow's gRPC between the nodes)"
        )
    return rules
