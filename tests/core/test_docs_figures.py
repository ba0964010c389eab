"""Issue 42, 8: what the docs say a setting's default is, held to the code.
Every mention of the form ``name`` (N s|min|h) in the docs and the README
names a setting of the spec (by its field name, or its path) and its default
in those units; the test reads both and compares (the docs once said the
trend's warm-up was 2 h where the default was 3 h)."""

from __future__ import annotations

import re
from pathlib import Path

from memoryguard_kuberay.core import settings, specfields

ROOT = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"`(?:spec\.)?([A-Za-z.]+)` \(([0-9][0-9,.]*) ?(s|min|h)\)")
UNIT_S = {"s": 1, "min": 60, "h": 3600}


def _defaults() -> dict[str, float]:
    out: dict[str, float] = {}
    for f in (*settings.POLICY_FIELDS, *specfields.FIELDS):
        if isinstance(f.default, int | float) and not isinstance(f.default, bool) and f.unit == "s":
            out[f.path] = out[f.path.rsplit(".", 1)[-1]] = float(f.default)
    return out


def test_every_default_the_docs_state_is_the_codes() -> None:
    defaults = _defaults()
    checked = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in MENTION.finditer(doc.read_text()):
            name, value, unit = m.group(1), float(m.group(2).replace(",", "")), m.group(3)
            if name not in defaults:
                continue
            checked.append(name)
            assert value * UNIT_S[unit] == defaults[name], (
                f"{doc.name}: `{name}` ({m.group(2)} {unit}) but the default is {defaults[name]:g} s")
    assert len(checked) >= 5, checked  # the mentions this test exists for are found


def test_every_picture_the_docs_link_is_in_the_repository() -> None:
    """A picture the docs show must be a file of the checkout, not one left
    out by .gitignore (all of docs/images once was: *.png)."""
    import subprocess

    linked = set()
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for m in re.finditer(r"\]\(((?:docs/)?images/[^)\s]+)\)", doc.read_text()):
            linked.add(ROOT / (m.group(1) if m.group(1).startswith("docs/") else "docs/" + m.group(1)))
    assert len(linked) >= 5, linked
    missing = sorted(str(p.relative_to(ROOT)) for p in linked if not p.is_file())
    assert not missing, f"the docs link pictures that are not there: {missing}"
    ignored = subprocess.run(["git", "check-ignore", *map(str, linked)], cwd=ROOT, capture_output=True, text=True)
    assert ignored.returncode != 0 or not ignored.stdout.strip(), f"ignored by git: {ignored.stdout}"
