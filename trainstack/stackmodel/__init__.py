"""The stack: its file read, typed by the schema, checked against the catalog, resolved once."""
