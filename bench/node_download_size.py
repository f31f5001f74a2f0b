"""How many bytes a node downloads on its first boot: the wheels of requirements-node.txt.

    .venv/bin/python bench/node_download_size.py

Resolves requirements-node.txt with pip (``--dry-run --report``, nothing installed) for this
machine's Python and platform, then asks the package index for each wheel's size (HTTP HEAD,
Content-Length). The figure goes into trainstack/catalog/downloads.csv, where the cost report
prices the first boot's Cloud NAT data processing with it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    with tempfile.TemporaryDirectory() as scratch:
        report = Path(scratch) / "report.json"
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed",
             "--target", str(Path(scratch) / "target"), "--report", str(report),
             "-r", str(REPOSITORY_ROOT / "requirements-node.txt")],
            check=True,
        )  # fmt: skip
        resolved = json.loads(report.read_text())["install"]
    total = 0
    for item in resolved:
        url = item["download_info"]["url"]
        if not url.startswith("https://"):
            raise SystemExit(f"pip reported a wheel that is not on an https index: {url}")
        request = urllib.request.Request(url, method="HEAD")  # noqa: S310 - https only, checked above
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - https only, checked above
            total += int(response.headers["Content-Length"])
    print(f"{len(resolved)} wheels, {total} bytes ({total / 2**30:.2f} GiB) for requirements-node.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())
