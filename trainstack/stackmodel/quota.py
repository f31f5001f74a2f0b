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
from dataclasses import dataclass, field
from typing import Any

from trainstack.base.googleapis import build_service, execute
from trainstack.base.records import record_json
from trainstack.catalog import Catalog, QuotaMetric, quota_metrics
from trainstack.stackmodel.resolved import ResolvedStack
from trainstack_contract import FLEX_START, SPOT
from trainstack_contract import ON_DEMAND as ON_DEMAND_CAPACITY

# The quota pools (quota_metrics.csv's pool column).
ON_DEMAND = "on_demand"
PREEMPTIBLE = "preemptible"
FITS, EXCEEDED, MISSING, NOT_REPORTED = "fits", "exceeded", "missing", "not reported"
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

    @property
    def available(self) -> float | None:
        return None if self.limit is None or self.usage is None else self.limit - self.usage

    @property
    def short_by(self) -> float | None:
        available = self.available
        return None if available is None else max(0.0, self.need - available)

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
        return all(line.status in (FITS, NOT_REPORTED) for line in self.lines)

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
    """The console page and, where Cloud Quotas' ID is known, the gcloud command that asks for it."""
    ways = [f"{CONSOLE_QUOTAS}?project={project} (search for {metric.metric})"]
    if metric.quota_id:
        dimensions = f" --dimensions=region={region}" if metric.scope == "region" else ""
        ways.append(
            "gcloud beta quotas preferences create --service=compute.googleapis.com "
            f"--project={shlex.quote(project)} --quota-id={metric.quota_id} --preferred-value={new_limit}{dimensions}"
        )
    return tuple(ways)


def _quotas(answer: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    found: dict[str, tuple[float, float]] = {}
    for quota in answer.get("quotas") or []:
        if isinstance(quota, Mapping) and isinstance(quota.get("metric"), str):
            found[quota["metric"]] = (float(quota.get("limit") or 0.0), float(quota.get("usage") or 0.0))
    return found


def _metric_for(need: Need, region_quotas: Mapping[str, tuple[float, float]]) -> tuple[QuotaMetric | None, str]:
    """The metric a need draws on, and a note when a Spot need falls back to the standard quota."""
    metrics = quota_metrics()
    own = metrics.get((need.kind, need.name, need.pool))
    if need.pool != PREEMPTIBLE:
        return own, ""
    # Google: request preemptible quota "to prevent Spot VMs from consuming your quotas for
    # standard VMs' CPUs, GPUs, and disks" (Compute Engine, "Create and use Spot VMs"): without
    # it (no such metric in the region, or a limit of 0) a Spot VM draws on the standard quota.
    if own is not None and own.metric and region_quotas.get(own.metric, (0.0, 0.0))[0] > 0:
        return own, ""
    standard = metrics.get((need.kind, need.name, ON_DEMAND))
    lacking = own.metric if own is not None and own.metric else f"preemptible quota for {need.name}"
    return standard, f"no {lacking} in the region: Spot draws on the standard quota"


def check_quotas(
    needs: list[Need], project: str, region: str, region_answer: Mapping[str, Any], project_answer: Mapping[str, Any]
) -> list[QuotaLine]:
    """Each quota the needs draw on, its limit and usage from the answers, and whether it fits."""
    region_quotas, project_quotas = _quotas(region_answer), _quotas(project_answer)
    by_metric: dict[str, list[Need]] = defaultdict(list)
    notes: dict[str, list[str]] = defaultdict(list)
    records: dict[str, QuotaMetric] = {}
    lines: list[QuotaLine] = []
    for need in needs:
        record, note = _metric_for(need, region_quotas)
        if record is None or not record.metric:
            why = record.note if record is not None else "the catalog maps no quota metric for it"
            lines.append(QuotaLine("", region, need.what, need.amount, NOT_REPORTED, nodes=need.nodes, notes=(why,)))
            continue
        by_metric[record.metric].append(need)
        records[record.metric] = record
        if note:
            notes[record.metric].append(note)
    gpus = [n for n in needs if n.kind == "gpu"]
    if gpus:
        record = quota_metrics()[GPUS_ALL_REGIONS]
        by_metric[record.metric] = gpus
        records[record.metric] = record
    for metric, grouped in by_metric.items():
        record = records[metric]
        quotas = project_quotas if record.scope == "project" else region_quotas
        total = sum(n.amount for n in grouped)
        what = "GPUs of every type, all regions" if record.scope == "project" else " + ".join(n.what for n in grouped)
        scope = "project" if record.scope == "project" else region
        nodes = tuple(dict.fromkeys(node for n in grouped for node in n.nodes))
        if metric not in quotas:
            where = "projects.get" if record.scope == "project" else f"regions.get for {region}"
            missing = f"{where} reported no {metric}: not checked"
            lines.append(QuotaLine(metric, scope, what, total, MISSING, nodes=nodes, notes=(missing, *notes[metric])))
            continue
        limit, usage = quotas[metric]
        status = FITS if total <= limit - usage else EXCEEDED
        request = request_more(record, project, region, math.ceil(usage + total)) if status == EXCEEDED else ()
        lines.append(QuotaLine(metric, scope, what, total, status, limit, usage, nodes, tuple(notes[metric]), request))
    return lines


def read_quotas(project: str, region: str, http: Any = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The answers of regions.get and projects.get; GoogleApiError (one line) when either fails."""
    compute = build_service("compute", "v1", http=http)
    region_answer = execute(
        compute.regions().get(project=project, region=region), f"the quotas of {region} in {project}", project
    )
    project_answer = execute(compute.projects().get(project=project), f"the quotas of project {project}", project)
    return region_answer, project_answer


def quota_report(stack: ResolvedStack, catalog: Catalog, http: Any = None) -> QuotaReport:
    region = stack.zone.rsplit("-", 1)[0]
    region_answer, project_answer = read_quotas(stack.project, region, http)
    lines = check_quotas(stack_needs(stack, catalog), stack.project, region, region_answer, project_answer)
    notes = []
    if stack.tpu is not None:
        notes.append(
            "the TPU VM is created through the Cloud TPU API, which keeps its own per-zone quota "
            f"(https://cloud.google.com/tpu/docs/quota): check it at {CONSOLE_QUOTAS}?project={stack.project}"
        )
    return QuotaReport(stack.stack, stack.project, region, tuple(lines), tuple(notes))
