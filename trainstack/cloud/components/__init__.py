"""Pulumi components, one per concern; :class:`TrainingStack` composes them."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi


@dataclass(frozen=True)
class Placement:
    """Where a machine of the stack runs: what the cluster, the TPU VM and the notebook share."""

    project: str
    zone: str
    network: pulumi.Input[str]
    subnetwork: pulumi.Input[str]
    labels: dict[str, str]
    # The stack's resource-name prefix: custom roles' ids and titles, and the names of the
    # resources that moved under a component (see aliases).
    stack_name: str


def waits_with(component: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """Options for a child that waits for what its component was declared to wait for.

    The engine does not carry a component's depends_on to its children: without this a VM
    would be created before the grants, code and egress its component waits for, as far as
    the engine's graph (and so `pulumi destroy` and a replacement) knows."""
    return pulumi.ResourceOptions(parent=component, depends_on=opts.depends_on if opts is not None else None)


def moved_here(component: pulumi.ComponentResource, opts: pulumi.ResourceOptions | None) -> pulumi.ResourceOptions:
    """Options for a child that used to be a child of ``component``'s own parent (the stack).

    The alias keeps the resource's identity, so `pulumi up` on an existing stack moves it
    under ``component`` instead of deleting and creating it again (a deleted custom role's id
    cannot be reused for 7 days)."""
    old_parent = opts.parent if opts is not None else None
    return pulumi.ResourceOptions(
        parent=component, aliases=[pulumi.Alias(parent=old_parent)] if old_parent is not None else None
    )


def with_former_type(opts: pulumi.ResourceOptions | None, former_type: str) -> pulumi.ResourceOptions:
    """``opts`` plus aliases under a component's former type: the type is part of the URN of
    the component and of its children, so without them `pulumi up` on an existing stack would
    replace the custom role (whose id a delete blocks for 7 days). Each alias the caller gave
    (a former parent) is kept, and repeated under the former type."""
    given = list((opts.aliases if opts is not None else None) or [])
    former = [pulumi.Alias(type_=former_type)] + [
        pulumi.Alias(name=a.name, type_=former_type, parent=a.parent, stack=a.stack, project=a.project)
        for a in given
        if isinstance(a, pulumi.Alias)
    ]
    return pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(aliases=former))
