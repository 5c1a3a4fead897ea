"""The jobs `MemoryService` is made of, one module each, over the shared `core.ServiceCore`.

`ingest` writes memories and recovers from crashes; `recalling` reads, recalls and counts
recalls; `entities` edits and reads the entity graph; `maintenance` reindexes, checks and
indexes queued captures; `enriching` runs the enrichment queue; `governing` scores sessions
and decides promotions. `memoryd.service` composes
them into the facade. Each is a class over the same stores so that a method moves between
them whole; a job calls another only through `ServiceCore`.
"""
