"""Readers and writers for other memory tools' formats."""
