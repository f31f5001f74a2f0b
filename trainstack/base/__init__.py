"""Shared ground for every layer: the one error type a user sees, the bounded file reader, name patterns, Google's APIs."""
