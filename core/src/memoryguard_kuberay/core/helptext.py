"""A command's ``--help`` description from its module's docstring."""

from __future__ import annotations


def summary(doc: str | None) -> str:
    """The docstring's first paragraph as one line, without reST's double
    backquotes: its first line alone ended mid-sentence (issue 26, 4)."""
    if not doc:
        return ""
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split()).replace("``", "")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def log_level(raw: str) -> str:
    """An argparse type: a log level by name (any case), else a usage error
    that says which are taken (``logging`` itself raised a traceback)."""
    import argparse

    level = raw.strip().upper()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"{raw[:40]!r}: one of {', '.join(LOG_LEVELS)}")
    return level
