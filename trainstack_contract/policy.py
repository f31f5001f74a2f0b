"""What the policy pack answers `trainstack check`: one finding per violated policy.

The pack runs in its own environment (policies/requirements.txt: its protobuf pin cannot share
the project's) and writes its findings as JSON, ``{"policies": [...], "violations": [...]}``,
each violation the fields of :class:`PolicyFinding`; trainstack.commands.check reads them back.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PolicyFinding:
    policy: str
    # The policy's enforcement level: advisory, mandatory (or disabled, never reported).
    enforcement: str
    resource_type: str
    resource_name: str
    message: str
