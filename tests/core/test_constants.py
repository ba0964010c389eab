"""One home for each name (issue 43): every key, env name, port and path in
core/constants.py is spelled there only; everywhere else imports it. Read
from the source's tokens, so a docstring or a comment that names a key is
not a second home, a string literal or a number is."""

from __future__ import annotations

import io
import tokenize
from pathlib import Path

from memoryguard_kuberay.core import constants as C

from ..devworld import ROOT

SOURCES = [p for part in ("core", "sidecar", "operator", "devkit") for p in (ROOT / part / "src").rglob("*.py")
           if p.name != "constants.py"]
NAMES = {v: k for k, v in vars(C).items() if k.isupper() and isinstance(v, str) and ("/" in v or "_" in v or "-" in v)
         and len(v) > 5}


def literals(path: Path) -> list[tuple[int, str, str]]:
    """(line, kind, text) of each one-line string literal and number."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
        if tok.type == tokenize.NUMBER:
            out.append((tok.start[0], "number", tok.string))
        elif tok.type == tokenize.STRING and not tok.string.lstrip("rbuRBU").startswith(('"""', "'''")):
            out.append((tok.start[0], "string", tok.string))
    return out


def test_the_names_in_constants_are_spelled_nowhere_else() -> None:
    assert NAMES, "constants.py lost its names"
    seen = []
    for path in SOURCES:
        for line, kind, text in literals(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            if kind == "number":
                if text == str(C.SIDECAR_PORT):
                    seen.append(f"{where}: the sidecar's port {text} (constants.SIDECAR_PORT)")
                continue
            body = text.lstrip("rbfuRBFU")[1:-1]
            if body in NAMES:
                seen.append(f"{where}: {body!r} (constants.{NAMES[body]})")
            elif body.startswith(C.PREFIX) or body.startswith(C.GROUP + "/"):
                seen.append(f"{where}: {body!r} spells a {C.GROUP} key (add it to constants.py)")
    assert not seen, "\n".join(seen)


def test_a_sidecar_flag_and_its_env_name_are_one_fact() -> None:
    assert C.sidecar_env("--pod-uid") == C.ENV_POD_UID == "MEMORYGUARD_POD_UID"
    assert C.OPERATOR_MAX_SAMPLES >= C.PAGE_SAMPLES  # a sidecar's page is always taken whole
