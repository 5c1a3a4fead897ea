"""The team server (`memoryd serve --team`): the daemon's app over TLS, behind the team gate,
with its own routes for user Cypher, entities and administration."""
