"""Full-text search over memories: a tantivy index kept beside the graph (DESIGN §4)."""
