"""Pulumi components, one per concern; :class:`TrainingStack` composes them."""

from __future__ import annotations

import pulumi


def moved_here(component: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """Options for a child that used to be a child of ``component``'s own parent (the stack).

    The alias keeps the resource's identity, so `pulumi up` on an existing stack moves it
    under ``component`` instead of deleting and creating it again (a deleted custom role's id
    cannot be reused for 7 days)."""
    old_parent = opts.parent if opts is not None else None
    return pulumi.ResourceOptions(
        parent=component, aliases=[pulumi.Alias(parent=old_parent)] if old_parent is not None else None
    )
