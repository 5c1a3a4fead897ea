"""Offline extraction: entities and relations proposed from a memory's text.

`pipeline.Extractor` is the entry point. It returns proposals (`models.Extraction`) and never
writes: the service decides what reaches the graph. spaCy is imported only by `spacy_stages`,
and only when an extraction first runs.
"""
