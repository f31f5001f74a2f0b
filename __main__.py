"""Pulumi entry point: `pulumi up` runs this with the selected stack's config."""

from trainstack.cloud.program import main

main()
