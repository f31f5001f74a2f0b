"""A standing cluster's job queue: its bucket objects, written under generation preconditions, and its history."""
