"""A developer's daemon in a team: its link to the team server, what it forwards there, the
outbox of team writes waiting for the server, and `memoryd share`."""
