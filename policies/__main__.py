"""The policy pack that `pulumi preview --policy-pack policies` runs.

Building a PolicyPack starts its gRPC server and blocks: the policies themselves live in the
importable ``trainstack_policies`` package, which tests and `trainstack check` use.
"""

from pulumi_policy import PolicyPack

from trainstack_policies import PACK_NAME, POLICIES

PolicyPack(name=PACK_NAME, policies=list(POLICIES))
