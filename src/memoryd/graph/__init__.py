"""The knowledge graph: memories, entities, relations and the supersedes chain."""
