"""A command's ``--help`` description from its module's docstring."""

from __future__ import annotations


def summary(doc: str | None) -> str:
    """The docstring's first paragraph as one line, without reST's double
    backquotes: its first line alone ended mid-sentence (issue 26, 4)."""
    if not doc:
        return ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split()).replace("``", "")
