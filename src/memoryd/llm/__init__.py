"""LLM providers with structured output, and the prompts memoryd sends them.

`base` holds the provider seam (retries, JSON validation, usage accounting); the
Anthropic, OpenAI-compatible and Ollama modules only translate one request and one
reply. `factory.provider_from_settings` is how the composition root builds one, and
`extract` holds the typed calls the extraction and governance layers make. Nothing
here reads or writes memories: callers decide what to do with the answers.
"""
