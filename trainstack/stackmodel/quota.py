"""What a stack needs of the project's Compute Engine quotas, read through the Compute Engine API
(regions.get for the stack's region, projects.get for the project-wide GPUS_ALL_REGIONS), and
which quotas it would exceed, by how much, and how to ask for more.

Which metric a resource draws on is data (trainstack/catalog/quota_metrics.csv, with sources);
a resource Compute Engine reports no metric for, or a metric the answer lacks, is said plainly:
never taken as zero or unlimited.
"""

from __future__ import annotations

import math
import shlex
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trainstack.base.errors import one_line
from trainstack.base.googleapis import CREDENTIALS_HINT, REQUEST_TIMEOUT_SECONDS, GoogleApiError, build_service, execute
from trainstack.base.records import record_json
from trainstack.catalog import Catalog, QuotaMetric, quota_metrics
from trainstack.stackmodel.resolved import ResolvedStack
from trainstack_contract import FLEX_START, SPOT
from trainstack_contract import ON_DEMAND as ON_DEMAND_CAPACITY

# The quota pools (quota_metrics.csv's pool column).
ON_DEMAND = "on_demand"
PREEMPTIBLE = "preemptible"
FITS, EXCEEDED, MISSING, NOT_REPORTED = "fits", "exceeded", "missing", "not reported"
# Under the limit Cloud Quotas reports, which comes without the usage.
UNDER_LIMIT = "under limit"
# A limit or usage in Google's answer that is not a count: a failed check, never room.
UNREADABLE = "unreadable"
CLOUD_QUOTAS = "cloud_quotas"  # quota_metrics.csv's scope for quotas read from the Cloud Quotas API
COMPUTE_SERVICE = "compute.googleapis.com"
CONSOLE_QUOTAS = "https://console.cloud.google.com/iam-admin/quotas"
GPUS_ALL_REGIONS = ("gpus_all_regions", "all", "any")


def quota_pool(capacity: str, catalog: Catalog) -> str:
    """The quota pool a node draws from, by its capacity: Spot VMs draw on the preemptible
    quotas (when the project has them; see :func:`check_quotas`); flex-start VMs where the
    catalog's flex_start_quota rule says (Google: preemptible); on-demand VMs and VMs that
    consume a reservation on the standard ones. Whether a reservation's own quota covers the
    VMs that consume it was not confirmed, so they are counted as on-demand VMs: the safe side."""
    if capacity == SPOT:
        return PREEMPTIBLE
    if capacity == FLEX_START:
        rule = catalog.capacity.row("flex_start_quota")
        return PREEMPTIBLE if rule is not None and rule.value == PREEMPTIBLE else ON_DEMAND
    return ON_DEMAND


@dataclass(frozen=True)
class Need:
    """``amount`` of one resource (``kind`` gpu/cpu/tpu, ``name`` its type, series or
    generation) from one pool, for the nodes named."""

    kind: str
    name: str
    pool: str
    amount: int
    nodes: tuple[str, ...]

    @property
    def what(self) -> str:
        unit = {"gpu": "GPUs", "cpu": "vCPUs", "tpu": "TPU chips"}.get(self.kind, "")
        spot = " (Spot)" if self.pool == PREEMPTIBLE else ""
        return f"{self.name} {unit}{spot}"


@dataclass(frozen=True)
class QuotaLine:
    """One quota the stack draws on, and whether it fits."""

    metric: str  # empty when Compute Engine reports none for it
    scope: str  # the region, or "project"
    what: str
    need: int
    status: str
    limit: float | None = None
    usage: float | None = None
    nodes: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    request: tuple[str, ...] = ()
    gpu_family: str = ""  # the GPU-family quota's dimension, where it is one

    @property
    def available(self) -> float | None:
        return None if self.limit is None or self.usage is None else self.limit - self.usage

    @property
    def short_by(self) -> float | None:
        """By how much the need exceeds what is left (the limit, where the usage is unknown: at least that)."""
        if self.limit is None:
            return None
        return max(0.0, self.need - (self.limit - (self.usage or 0.0)))

    def to_json(self) -> dict[str, Any]:
        return record_json(self, metric=self.metric or None, available=self.available, short_by=self.short_by)


@dataclass(frozen=True)
class QuotaReport:
    stack: str
    project: str
    region: str
    lines: tuple[QuotaLine, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def fits(self) -> bool:
        """Every quota the API reports fits; a metric the answer lacks counts as a failed check."""
        return all(line.status in (FITS, UNDER_LIMIT, NOT_REPORTED) for line in self.lines)

    def to_json(self) -> dict[str, Any]:
        return record_json(self, exclude=("lines",), fits=self.fits, quotas=[line.to_json() for line in self.lines])


def stack_needs(stack: ResolvedStack, catalog: Catalog) -> list[Need]:
    """Every vCPU, GPU and TPU chip the stack's machines take, by resource and pool."""
    amounts: dict[tuple[str, str, str], int] = defaultdict(int)
    nodes: dict[tuple[str, str, str], list[str]] = defaultdict(list)

    def add(kind: str, name: str, pool: str, amount: int, node: str) -> None:
        amounts[(kind, name, pool)] += amount
        if node not in nodes[(kind, name, pool)]:
            nodes[(kind, name, pool)].append(node)

    machines = []
    if stack.cluster is not None:
        machines += [(n.vm_name, n.machine_type, n.accelerator, n.capacity) for n in stack.cluster.nodes]
    if stack.notebook is not None:  # a Workbench instance is a Compute Engine VM, on demand
        machines.append(
            (stack.notebook.instance_name, stack.notebook.machine_type, stack.notebook.accelerator, ON_DEMAND_CAPACITY)
        )
    for vm_name, machine_type, accelerator, capacity in machines:
        pool = quota_pool(capacity, catalog)
        machine = catalog.machine_types[machine_type]
        add("cpu", machine.series, pool, machine.vcpus, vm_name)
        if accelerator is not None:  # built-in GPUs (A2, A3, A4, G2) included
            add("gpu", accelerator.type, pool, accelerator.count, vm_name)
    if stack.tpu is not None:
        found = catalog.tpu_generation_for(stack.tpu.accelerator_type)
        if found is not None:
            generation, size = found
            add(
                "tpu",
                generation.generation,
                quota_pool(stack.tpu.capacity, catalog),
                generation.chips(size),
                stack.tpu.vm_name,
            )
    return [
        Need(kind, name, pool, amount, tuple(nodes[(kind, name, pool)]))
        for (kind, name, pool), amount in amounts.items()
    ]


def request_more(metric: QuotaMetric, project: str, region: str, new_limit: int) -> tuple[str, ...]:
    """The console page and, where Cloud Quotas' ID is known, the gcloud command that asks for it
    (an increase needs a contact email: the gcloud account's, by default)."""
    ways = [f"{CONSOLE_QUOTAS}?project={project} (search for {metric.label})"]
    if metric.quota_id:
        dimensions = [f"region={region}"] if metric.scope in ("region", CLOUD_QUOTAS) else []
        dimensions += [f"gpu_family={metric.gpu_family}"] if metric.gpu_family else []
        flags = f" --dimensions={','.join(dimensions)}" if dimensions else ""
        ways.append(
            "gcloud beta quotas preferences create --service=compute.googleapis.com "
            f"--project={shlex.quote(project)} --quota-id={metric.quota_id} --preferred-value={new_limit}{flags} "
            '--email="$(gcloud config get-value account)"'
        )
    return tuple(ways)


class UnreadableFigure(Exception):
    """A limit or usage in Google's answer that is not a finite, non-negative number; ``str()``
    says which and what it was."""


def quota_figure(value: Any, what: str) -> float:
    """A limit or usage as Google answers it (a JSON number, or an int64 as a string), or
    UnreadableFigure: never a figure that would count as room ("Infinity", "NaN", -1, "abc")."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise UnreadableFigure(f"{what} {value!r} is not a number")
    try:
        figure = float(value)
    except ValueError:
        raise UnreadableFigure(f"{what} {value!r} is not a number") from None
    if not math.isfinite(figure) or figure < 0:
        raise UnreadableFigure(f"{what} {value!r} is not a finite count")
    return figure


def _quotas(answer: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """regions.get's or projects.get's quotas by metric, as answered (read by quota_figure)."""
    found: dict[str, Mapping[str, Any]] = {}
    quotas = answer.get("quotas")
    for quota in quotas if isinstance(quotas, list) else []:
        if isinstance(quota, Mapping) and isinstance(quota.get("metric"), str):
            found[quota["metric"]] = quota
    return found


def quota_info_limit(info: Mapping[str, Any], region: str, gpu_family: str = "") -> float | None:
    """The value a Cloud Quotas QuotaInfo enforces in ``region`` (for ``gpu_family``): the first
    of its dimensionsInfos, which Google orders from the most specific, whose dimensions the
    target has and whose applicableLocations include the region; None when none applies. An
    absent value is 0 (proto3 JSON leaves zero out) and int64 values come as strings;
    UnreadableFigure for one that is not a count."""
    target = {"region": region, **({"gpu_family": gpu_family} if gpu_family else {})}
    entries = info.get("dimensionsInfos")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, Mapping):
            continue
        dimensions = entry.get("dimensions") or {}
        if not isinstance(dimensions, Mapping) or any(target.get(k) != v for k, v in dimensions.items()):
            continue
        locations = entry.get("applicableLocations") or []
        if locations and region not in locations and "global" not in locations:
            continue
        details = entry.get("details") or {}
        value = details.get("value", 0) if isinstance(details, Mapping) else None
        return quota_figure(0 if value == "" else value, "the value")
    return None


@dataclass(frozen=True)
class QuotaAnswers:
    """What Google answered: Compute Engine's regions.get and projects.get, and Cloud Quotas'
    QuotaInfo by quota ID (None: Cloud Quotas has no such quota in the project)."""

    region: Mapping[str, Any]
    project: Mapping[str, Any]
    cloud_quotas: Mapping[str, Mapping[str, Any] | None] = field(default_factory=dict)

    def limit_and_usage(self, record: QuotaMetric, region: str) -> tuple[float, float | None] | None:
        """The limit and usage of a quota (usage None: Cloud Quotas reports limits alone);
        None when Google's answer lacks the quota; UnreadableFigure when a figure is not one."""
        if record.scope == CLOUD_QUOTAS:
            info = self.cloud_quotas.get(record.quota_id)
            limit = None if info is None else quota_info_limit(info, region, record.gpu_family)
            return None if limit is None else (limit, None)
        quota = _quotas(self.project if record.scope == "project" else self.region).get(record.metric)
        if quota is None:
            return None
        return quota_figure(quota.get("limit", 0), "the limit"), quota_figure(quota.get("usage", 0), "the usage")

    def missing(self, record: QuotaMetric, region: str) -> str:
        if record.scope == CLOUD_QUOTAS:
            family = f", gpu_family {record.gpu_family}" if record.gpu_family else ""
            if self.cloud_quotas.get(record.quota_id) is None:
                return f"Cloud Quotas has no quota {record.quota_id} in the project: not checked"
            return f"Cloud Quotas' {record.quota_id} sets no value for region {region}{family}: not checked"
        where = "projects.get" if record.scope == "project" else f"regions.get for {region}"
        return f"{where} reported no {record.metric}: not checked"


def _metric_for(need: Need, answers: QuotaAnswers, region: str) -> tuple[QuotaMetric | None, str]:
    """The metric a need draws on, and a note when a Spot need falls back to the standard quota."""
    metrics = quota_metrics()
    own = metrics.get((need.kind, need.name, need.pool))
    if need.pool != PREEMPTIBLE:
        return own, ""
    # Google: request preemptible quota "to prevent Spot VMs from consuming your quotas for
    # standard VMs' CPUs, GPUs, and disks" (Compute Engine, "Create and use Spot VMs"): without
    # it (no such metric in the region, or a limit of 0) a Spot VM draws on the standard quota.
    try:
        if own is not None and own.metric and ((answers.limit_and_usage(own, region) or (0.0, None))[0] > 0):
            return own, ""
    except UnreadableFigure:
        return own, ""  # named as unreadable on its own line, never taken as an absent quota
    standard = metrics.get((need.kind, need.name, ON_DEMAND))
    lacking = own.label if own is not None and own.metric else f"preemptible quota for {need.name}"
    return standard, f"no {lacking} in the region: Spot draws on the standard quota"


def cloud_quota_ids(needs: list[Need]) -> list[str]:
    """The Cloud Quotas IDs the needs may draw on (a Spot need's standard quota included)."""
    metrics = quota_metrics()
    records = [metrics.get((n.kind, n.name, n.pool)) for n in needs]
    records += [metrics.get((n.kind, n.name, ON_DEMAND)) for n in needs if n.pool == PREEMPTIBLE]
    return sorted({r.quota_id for r in records if r is not None and r.scope == CLOUD_QUOTAS and r.quota_id})


def check_quotas(needs: list[Need], project: str, region: str, answers: QuotaAnswers) -> list[QuotaLine]:
    """Each quota the needs draw on, its limit and usage from the answers, and whether it fits."""
    grouped_needs: dict[str, list[Need]] = defaultdict(list)
    notes: dict[str, list[str]] = defaultdict(list)
    records: dict[str, QuotaMetric] = {}
    lines: list[QuotaLine] = []
    for need in needs:
        record, note = _metric_for(need, answers, region)
        if record is None or not record.metric:
            why = record.note if record is not None else "the catalog maps no quota metric for it"
            lines.append(QuotaLine("", region, need.what, need.amount, NOT_REPORTED, nodes=need.nodes, notes=(why,)))
            continue
        grouped_needs[record.label].append(need)
        records[record.label] = record
        if note:
            notes[record.label].append(note)
    gpus = [n for n in needs if n.kind == "gpu"]
    if gpus:
        record = quota_metrics()[GPUS_ALL_REGIONS]
        grouped_needs[record.label] = gpus
        records[record.label] = record
    for label, grouped in grouped_needs.items():
        record = records[label]
        total = sum(n.amount for n in grouped)
        what = "GPUs of every type, all regions" if record.scope == "project" else " + ".join(n.what for n in grouped)
        scope = "project" if record.scope == "project" else region
        nodes = tuple(dict.fromkeys(node for n in grouped for node in n.nodes))
        line = QuotaLine(record.metric, scope, what, total, MISSING, nodes=nodes, gpu_family=record.gpu_family)
        try:
            found = answers.limit_and_usage(record, region)
        except UnreadableFigure as unreadable:
            note = f"Google's answer for {record.label}: {unreadable}; not counted as room"
            lines.append(replace(line, status=UNREADABLE, notes=(note, *notes[label])))
            continue
        if found is None:
            lines.append(replace(line, notes=(answers.missing(record, region), *notes[label])))
            continue
        limit, usage = found
        if usage is None:
            status = UNDER_LIMIT if total <= limit else EXCEEDED
            notes[label].append(
                "Cloud Quotas reports the limit, not the usage: what already runs in the region draws on it too"
            )
        else:
            status = FITS if total <= limit - usage else EXCEEDED
        wanted = math.ceil((usage or 0.0) + total)
        request = request_more(record, project, region, wanted) if status == EXCEEDED else ()
        lines.append(replace(line, status=status, limit=limit, usage=usage, notes=tuple(notes[label]), request=request))
    return lines


def read_quotas(project: str, region: str, http: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answers of regions.get and projects.get; GoogleApiError (one line) when either fails."""
    compute = build_service("compute", "v1", http=http)
    region_answer = execute(
        compute.regions().get(project=project, region=region), f"the quotas of {region} in {project}", project
    )
    project_answer = execute(compute.projects().get(project=project), f"the quotas of project {project}", project)
    return region_answer, project_answer


def read_quota_infos(project: str, quota_ids: list[str], channel: Any = None) -> dict[str, dict[str, Any] | None]:
    """Cloud Quotas' QuotaInfo of each of Compute Engine's quotas named, through Google's client
    library (projects.locations.services.quotaInfos.get), as JSON; None for a quota the project
    does not have. Billed to and read from ``project``. ``channel``: a gRPC channel to use
    instead of Google's endpoint with the user's application default credentials (tests)."""
    from google.api_core import exceptions
    from google.auth import exceptions as auth
    from google.cloud import cloudquotas_v1
    from google.cloud.cloudquotas_v1.services.cloud_quotas.transports import CloudQuotasGrpcTransport

    what = f"Cloud Quotas of project {project}"
    try:
        if channel is not None:
            client = cloudquotas_v1.CloudQuotasClient(transport=CloudQuotasGrpcTransport(channel=channel))
        else:
            client = cloudquotas_v1.CloudQuotasClient(client_options={"quota_project_id": project})
    except auth.GoogleAuthError as error:
        raise GoogleApiError(
            f"{what}: no usable Google Cloud credentials ({one_line(str(error))}); {CREDENTIALS_HINT}"
        ) from error
    infos: dict[str, dict[str, Any] | None] = {}
    for quota_id in quota_ids:
        name = f"projects/{project}/locations/global/services/{COMPUTE_SERVICE}/quotaInfos/{quota_id}"
        try:
            info = client.get_quota_info(name=name, timeout=REQUEST_TIMEOUT_SECONDS)
        except exceptions.NotFound:
            infos[quota_id] = None
            continue
        except exceptions.GoogleAPICallError as error:
            raise GoogleApiError(f"{what} ({quota_id}): {cloud_quotas_error_line(error, project)}") from error
        except auth.GoogleAuthError as error:
            raise GoogleApiError(
                f"{what}: Google Cloud credentials refused ({one_line(str(error))}); {CREDENTIALS_HINT}"
            ) from error
        infos[quota_id] = cloudquotas_v1.QuotaInfo.to_dict(info, preserving_proto_field_name=False)
    return infos


def cloud_quotas_error_line(error: Any, project: str) -> str:
    """One line for a failed Cloud Quotas call, with what to do where Google says."""
    message = one_line(getattr(error, "message", "") or str(error))
    code = getattr(error, "grpc_status_code", None)
    name = getattr(code, "name", "") if code is not None else ""
    if getattr(error, "reason", None) == "SERVICE_DISABLED":
        return (
            "the Cloud Quotas API is not enabled in the project: "
            f"gcloud services enable cloudquotas.googleapis.com --project={shlex.quote(project)}"
        )
    if name == "PERMISSION_DENIED":
        return f"permission denied ({message}): reading quotas needs roles/servicemanagement.quotaViewer (Quota Viewer)"
    return f"{name or 'error'}: {message}"


def quota_report(stack: ResolvedStack, catalog: Catalog, http: Any = None, channel: Any = None) -> QuotaReport:
    region = stack.zone.rsplit("-", 1)[0]
    needs = stack_needs(stack, catalog)
    region_answer, project_answer = read_quotas(stack.project, region, http)
    quota_ids = cloud_quota_ids(needs)
    infos = read_quota_infos(stack.project, quota_ids, channel) if quota_ids else {}
    lines = check_quotas(needs, stack.project, region, QuotaAnswers(region_answer, project_answer, infos))
    notes = []
    if stack.tpu is not None:
        notes.append(
            "the TPU VM is created through the Cloud TPU API, which keeps its own per-zone quota "
            f"(https://cloud.google.com/tpu/docs/quota): check it at {CONSOLE_QUOTAS}?project={stack.project}"
        )
    return QuotaReport(stack.stack, stack.project, region, tuple(lines), tuple(notes))
