"""The `memoryd` command line."""
