"""The Pulumi program: components, boot scripts rendered from templates/, and the offline plan."""
