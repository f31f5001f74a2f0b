"""Pulumi components, one per concern; :class:`TrainingStack` composes them."""
