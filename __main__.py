"""Pulumi entry point: `pulumi up` runs this with the selected stack's config."""

import sys

from trainstack.errors import StackConfigError
from trainstack.program import build, stack_config_from_pulumi

try:
    config = stack_config_from_pulumi()
except StackConfigError as error:
    # One line per problem, before any resource is registered; no traceback.
    print("trainstack: the stack configuration is not valid:", file=sys.stderr)
    for problem in error.problems:
        print(f"  {problem}", file=sys.stderr)
    sys.exit(1)

build(config)
