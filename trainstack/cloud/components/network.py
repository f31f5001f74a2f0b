"""A private network: no public IPs, egress through Cloud NAT, SSH only through IAP."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

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
        training_port, training_service_account = args.training_port, args.training_service_account
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
        self.iap_ssh = self._ingress(
            f"{name}-iap-ssh", project, 22, args.ssh_service_accounts, source_ranges=[IAP_SOURCE_RANGE], opts=child
        )
        # TensorFlow's gRPC between cluster nodes, on the one port TF_CONFIG names, and only
        # from VMs running as the training service account (not the notebook's or the TPU's).
        # No TF_CONFIG cluster, no port.
        if training_port is not None and training_service_account is not None:
            self.training = self._ingress(
                f"{name}-training",
                project,
                training_port,
                [training_service_account],
                source_service_accounts=[training_service_account],
                opts=child,
            )
        self.register_outputs({"network": self.network.self_link, "subnetwork": self.subnetwork.self_link})

    def _ingress(
        self,
        resource_name: str,
        project: str,
        port: int,
        targets: list[pulumi.Input[str]],
        *,
        opts: pulumi.ResourceOptions,
        source_ranges: list[str] | None = None,
        source_service_accounts: list[pulumi.Input[str]] | None = None,
    ) -> gcp.compute.Firewall:
        """A rule that lets TCP to ``port`` in, to the machines running as ``targets``, from the
        sources named (IP ranges or service accounts)."""
        return gcp.compute.Firewall(
            resource_name,
            project=project,
            network=self.network.id,
            direction="INGRESS",
            source_ranges=source_ranges,
            source_service_accounts=source_service_accounts,
            target_service_accounts=targets,
            allows=[gcp.compute.FirewallAllowArgs(protocol="tcp", ports=[str(port)])],
            opts=opts,
        )
