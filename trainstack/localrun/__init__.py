"""`trainstack local`: a stack's cluster run on this machine by its own boot script and node agent."""
