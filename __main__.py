"""Pulumi entry point: `pulumi up` runs this with the selected stack's config."""

import sys

from trainstack.errors import StackConfigError
from trainstack.program import build, stack_from_pulumi

try:
    stack, boot = stack_from_pulumi()
except StackConfigError as error:
    # One line per problem, before any resource is registered; no traceback.
    print(error.report(), file=sys.stderr)
    sys.exit(1)

build(stack, boot)
