"""Pulumi entry point: `pulumi up` runs this with the selected stack's config."""

from trainstack.program import main

main()
