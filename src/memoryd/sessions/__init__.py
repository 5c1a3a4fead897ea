"""An agent's session as the hooks record it: stdlib only, below the service.

`session` (the normalised session and what a tool call did), `journal` (the hook events of
agents without a transcript file, assembled into a session) and `summary` (the session
memory's title and markdown body). The capture hook imports them before anything heavy, and
the service uses them too: it assembles a sensitive scope's session from its sealed journal.
"""
