"""A local Cloud Quotas server: the gRPC service google.api.cloudquotas.v1.CloudQuotas, speaking
the protocol Google's client library speaks (messages serialised with the library's own
protobuf types, so an answer off Google's schema cannot be built), holding one project's
quotas and answering GetQuotaInfo by Google's rules:

- the name must be projects/P/locations/global/services/S/quotaInfos/ID (the proto: the
  location "must be global"), else INVALID_ARGUMENT;
- the request must carry the routing header the library sends (x-goog-request-params: name=...);
- a project other than the one it holds: PERMISSION_DENIED, as Google answers a caller without
  cloudquotas.quotas.get there; a quota the project lacks: NOT_FOUND.

It records each name asked for.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator, Mapping
from concurrent import futures
from contextlib import contextmanager
from typing import Any

import grpc
from google.cloud.cloudquotas_v1.types import cloudquotas, resources

SERVICE = "google.api.cloudquotas.v1.CloudQuotas"
NAME = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)/services/(?P<service>[^/]+)/quotaInfos/(?P<quota>[^/]+)"
)


def dimensions_info(value: int | None, locations: list[str], **dimensions: str) -> dict[str, Any]:
    """One of a QuotaInfo's dimensionsInfos, as Cloud Quotas' JSON names its fields (value None:
    left out, as proto3 leaves out a zero)."""
    details = {} if value is None else {"value": value}
    return {"dimensions": dimensions, "details": details, "applicable_locations": locations}


def quota_info(
    project: str, quota_id: str, metric: str, dimensions: list[str], infos: list[dict[str, Any]]
) -> resources.QuotaInfo:
    return resources.QuotaInfo(
        name=f"projects/{project}/locations/global/services/compute.googleapis.com/quotaInfos/{quota_id}",
        quota_id=quota_id,
        metric=metric,
        service="compute.googleapis.com",
        is_precise=True,
        container_type=resources.QuotaInfo.ContainerType.PROJECT,
        dimensions=dimensions,
        quota_display_name=quota_id,
        metric_unit="1",
        dimensions_infos=[resources.DimensionsInfo(**info) for info in infos],
    )


class CloudQuotasServer:
    def __init__(self, project: str, quotas: Mapping[str, resources.QuotaInfo], enabled: bool = True) -> None:
        self.project = project
        self.quotas = dict(quotas)
        self.enabled = enabled
        self.names: list[str] = []

    def refuse_disabled(self, context: grpc.ServicerContext) -> None:
        """Google's answer when the API is not enabled in the project: PERMISSION_DENIED with an
        ErrorInfo whose reason is SERVICE_DISABLED."""
        from google.protobuf import any_pb2
        from google.rpc import code_pb2, error_details_pb2, status_pb2
        from grpc_status import rpc_status

        detail = any_pb2.Any()
        detail.Pack(
            error_details_pb2.ErrorInfo(
                reason="SERVICE_DISABLED",
                domain="googleapis.com",
                metadata={"service": "cloudquotas.googleapis.com", "consumer": f"projects/{self.project}"},
            )
        )
        message = (
            f"Cloud Quotas API has not been used in project {self.project} before or it is disabled. "
            "Enable it by visiting https://console.developers.google.com/apis/api/cloudquotas.googleapis.com/overview"
        )
        status = status_pb2.Status(code=code_pb2.PERMISSION_DENIED, message=message, details=[detail])
        context.abort_with_status(rpc_status.to_status(status))

    def get_quota_info(
        self, request: cloudquotas.GetQuotaInfoRequest, context: grpc.ServicerContext
    ) -> resources.QuotaInfo:
        routing = dict(context.invocation_metadata()).get("x-goog-request-params", "")
        if urllib.parse.unquote(routing) != f"name={request.name}":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "missing or wrong x-goog-request-params routing header")
        self.names.append(request.name)
        if not self.enabled:
            self.refuse_disabled(context)
        found = NAME.fullmatch(request.name)
        if found is None or found["location"] != "global":
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"Invalid resource name: {request.name}")
        assert found is not None
        if found["project"] != self.project:
            context.abort(
                grpc.StatusCode.PERMISSION_DENIED,
                f"Permission 'cloudquotas.quotas.get' denied on resource '{request.name}'",
            )
        info = self.quotas.get(found["quota"]) if found["service"] == "compute.googleapis.com" else None
        if info is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"QuotaInfo {request.name} not found")
        assert info is not None
        return info


@contextmanager
def cloud_quotas(
    project: str, quotas: Mapping[str, resources.QuotaInfo], enabled: bool = True
) -> Iterator[tuple[CloudQuotasServer, grpc.Channel]]:
    """A running server on a free loopback port, and an insecure channel to it."""
    state = CloudQuotasServer(project, quotas, enabled)
    handler = grpc.method_handlers_generic_handler(
        SERVICE,
        {
            "GetQuotaInfo": grpc.unary_unary_rpc_method_handler(
                state.get_quota_info,
                request_deserializer=cloudquotas.GetQuotaInfoRequest.deserialize,
                response_serializer=resources.QuotaInfo.serialize,
            )
        },
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    try:
        yield state, channel
    finally:
        channel.close()
        server.stop(grace=None)
