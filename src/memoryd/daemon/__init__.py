"""`memoryd serve`: the one process that owns the graph (its client is `memoryd.client`)."""
