"""``trainstack quota``: the project's Compute Engine quotas the stack draws on, read before
`pulumi up` (:mod:`trainstack.stackmodel.quota`); exit 1 when one would be exceeded or the check failed."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from trainstack.commands.stackargs import add_stack_arguments, load_resolved

if TYPE_CHECKING:
    from trainstack.stackmodel.quota import QuotaLine, QuotaReport

# The HTTP object the Google client uses; None: the user's application default credentials.
# Tests set the library's HttpMockSequence here.
HTTP: Any = None
# The gRPC channel the Cloud Quotas client uses; None: Google's endpoint with those credentials.
# Tests set a channel to a local Cloud Quotas server here.
QUOTAS_CHANNEL: Any = None


def _figure(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


def format_line(line: QuotaLine) -> list[str]:
    from trainstack.stackmodel.quota import EXCEEDED, FITS, NOT_REPORTED, UNDER_LIMIT

    name = line.metric or "(no quota metric)"
    if line.gpu_family:
        name += f" [gpu_family={line.gpu_family}]"
    head = f"  {line.status.upper():<12} {name:<34} {line.scope:<12} need {line.need:g}"
    if line.status in (FITS, EXCEEDED) and line.usage is not None:
        head += f", limit {_figure(line.limit)}, used {_figure(line.usage)}, available {_figure(line.available)}"
    elif line.status in (UNDER_LIMIT, EXCEEDED):
        head += f", limit {_figure(line.limit)} (usage not reported)"
    if line.status == EXCEEDED:
        head += f": short by {'at least ' if line.usage is None else ''}{_figure(line.short_by)}"
    if line.status == NOT_REPORTED:
        head += ": not checked here"
    lines = [head, f"      {line.what}; nodes: {', '.join(line.nodes)}"]
    lines += [f"      note: {note}" for note in line.notes]
    lines += [f"      request more: {way}" for way in line.request]
    return lines


def format_report(report: QuotaReport) -> list[str]:
    lines = [f"Quotas of project {report.project} for stack {report.stack} (region {report.region}):"]
    for line in report.lines:
        lines += format_line(line)
    lines += [f"  note: {note}" for note in report.notes]
    verdict = "every quota the API reports fits" if report.fits else "the stack would not fit: see above"
    lines.append(f"  {verdict}")
    return lines


def cmd_quota(args: argparse.Namespace) -> int:
    from trainstack.base.googleapis import GoogleApiError
    from trainstack.catalog import load_catalog
    from trainstack.stackmodel.quota import quota_report

    stack = load_resolved(args)
    try:
        report = quota_report(stack, load_catalog(), http=HTTP, channel=QUOTAS_CHANNEL)
    except GoogleApiError as error:
        print(f"trainstack quota: {error}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        print("\n".join(format_report(report)))
    return 0 if report.fits else 1


def register(subparsers: Any) -> None:
    quota = subparsers.add_parser(
        "quota",
        help="the project's Compute Engine quotas the stack needs (GPUs, Spot GPUs, CPUs, TPU chips): which it would exceed",
        description=(
            "Read the project's regional and project-wide Compute Engine quotas (regions.get, projects.get) and, "
            "for the GPUs Compute Engine does not report there (H100, H100 Mega, H200, B200: the GPU-family "
            "quota), the Cloud Quotas API, with your application default credentials, and compare them with "
            "what the stack's VMs need, before `pulumi up`. Exit 0 when everything fits; 1 when a quota would "
            "be exceeded, a quota the stack needs is missing from Google's answer, or a call failed. Needs "
            "compute.regions.get and compute.projects.get (roles/compute.viewer) and, for those GPUs, "
            "roles/servicemanagement.quotaViewer (Quota Viewer) and the Cloud Quotas API enabled."
        ),
    )
    add_stack_arguments(quota)
    quota.add_argument("--json", action="store_true", help="print JSON")
    quota.set_defaults(func=cmd_quota)
