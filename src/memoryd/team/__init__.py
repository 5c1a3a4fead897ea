"""Team memory, its domain: users and tokens, projects keyed by their git remote, grants, the
one gate every team request goes through, the cut of the team graph a user may read, backup.

Its surfaces live apart: `team_server/` (the team server) and `team_member/` (a developer's
daemon in a team).
"""
