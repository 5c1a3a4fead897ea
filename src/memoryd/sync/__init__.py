"""Sync between devices, and to and from mcp-memory-service: one `memories.json` file
(seeds/000, corrected by interop/FORMATS.md §1). `writing` writes the file and `document`
reads it, `merge` decides field by field what an import changes; `domain.syncing` applies it."""
