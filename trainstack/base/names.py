"""Name patterns shared by the stack schema and the commands that take a place on their own
(``gpus --zone``, ``init --project``): standard library only, so such commands load no schema library."""

from __future__ import annotations

import argparse
import re

from trainstack_contract.names import PROJECT_ID

REGION_PATTERN = re.compile(r"[a-z]+-[a-z]+[0-9]+")
# A zone is its region and one letter (us-central1-a); the region is then checked
# against the catalog's list of regions.
ZONE_PATTERN = re.compile(r"(?P<region>[a-z]+-[a-z]+[0-9]+)-[a-z]")
# A Google Cloud project ID (the node agent reads its project with the same pattern).
PROJECT_ID_PATTERN = PROJECT_ID


def zone_argument(text: str) -> str:
    """argparse type for ``--zone``: a zone name, matched whole."""
    if not ZONE_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a zone: zones look like us-central1-a")
    return text


def region_argument(text: str) -> str:
    """argparse type for ``--region``: a region name, matched whole."""
    if not REGION_PATTERN.fullmatch(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a region: regions look like us-central1")
    return text
