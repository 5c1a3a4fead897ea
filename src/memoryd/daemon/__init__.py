"""`memoryd serve`: the one process that owns the graph, and the client the CLI uses to reach it."""
