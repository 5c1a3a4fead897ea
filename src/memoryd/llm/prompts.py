"""The prompt templates shipped in `memoryd/llm/prompts/*.md`, and their rendering.

A template holds a system part and a user part, marked by the HTML comments
`<!-- system -->` and `<!-- user -->` (anything before the first marker is a note for
maintainers and is not sent). `{name}` placeholders are filled in one pass, so the
JSON examples in a template need no brace escaping and a value that itself contains
`{…}` is never expanded. Values are wrapped in XML-style tags by the templates; a value
that contains one of those closing tags has it neutralised so text cannot break out
of its tag and pose as instructions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

PROMPT_NAMES = (
    "extract_entities",
    "judge_supersedes",
    "dura",
    "rewrite_identity",
    "profile_change_report",
    "summarize_session",
)

_SYSTEM_MARKER = "<!-- system -->"
_USER_MARKER = "<!-- user -->"
_PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")
_CLOSING_TAG = re.compile(r"</([A-Za-z_][A-Za-z0-9_-]*)>")


@dataclass(frozen=True)
class Prompt:
    """A rendered prompt: what goes into `complete_json(system=…, prompt=…)`."""

    system: str
    user: str


@dataclass(frozen=True)
class Template:
    name: str
    system: str
    user: str
    placeholders: frozenset[str]
    tags: frozenset[str]

    def render(self, **values: str) -> Prompt:
        """Fill every placeholder; a missing or unknown one is a programming error."""
        given = set(values)
        if given != self.placeholders:
            missing = sorted(self.placeholders - given)
            unknown = sorted(given - self.placeholders)
            raise ValueError(
                f"prompt {self.name!r}: missing values {missing}, unknown values {unknown}"
            )
        safe = {key: self._neutralise(value) for key, value in values.items()}

        def fill(match: re.Match[str]) -> str:
            return safe[match.group(1)]

        return Prompt(
            system=_PLACEHOLDER.sub(fill, self.system),
            user=_PLACEHOLDER.sub(fill, self.user),
        )

    def _neutralise(self, value: str) -> str:
        def escape(match: re.Match[str]) -> str:
            tag = match.group(1)
            return f"<\\/{tag}>" if tag.lower() in self.tags else match.group(0)

        return _CLOSING_TAG.sub(escape, value)


def parse_template(name: str, source: str) -> Template:
    """Split a template file into its system and user parts."""
    system_at = source.find(_SYSTEM_MARKER)
    user_at = source.find(_USER_MARKER)
    if system_at == -1 or user_at == -1 or user_at < system_at:
        raise ValueError(
            f"prompt template {name!r} needs a {_SYSTEM_MARKER} part followed by a "
            f"{_USER_MARKER} part"
        )
    system = source[system_at + len(_SYSTEM_MARKER) : user_at].strip()
    user = source[user_at + len(_USER_MARKER) :].strip()
    body = f"{system}\n{user}"
    return Template(
        name=name,
        system=system,
        user=user,
        placeholders=frozenset(_PLACEHOLDER.findall(body)),
        tags=frozenset(tag.lower() for tag in _CLOSING_TAG.findall(body)),
    )


@cache
def load_template(name: str) -> Template:
    """The packaged template `name` (one of PROMPT_NAMES), read once per process."""
    if name not in PROMPT_NAMES:
        raise ValueError(f"unknown prompt {name!r}; known: {', '.join(PROMPT_NAMES)}")
    source = resources.files("memoryd.llm").joinpath("prompts", f"{name}.md").read_text("utf-8")
    return parse_template(name, source)


def render_prompt(name: str, **values: str) -> Prompt:
    """Load and fill the template `name`."""
    return load_template(name).render(**values)
