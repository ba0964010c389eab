"""``forensics --diff`` (issue 27, 2): what grew between two kept artifacts,
ranked, from artifacts shaped as the operator keeps them."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from memoryguard_kuberay.operator.forensics import cli as forensics_cli
from memoryguard_kuberay.operator.forensics import diff as forensics_diff

MIB = 1024**2


def _artifact(pod: str, at: str, in_use: int, sites: dict[str, tuple[int, int]],
              procs: list[tuple[int, str, int]], recorded: int = 1) -> dict[str, Any]:
    return {"pod": pod, "collectedAt": at, "group": "workers", "cluster": "rc", "namespace": "ns", "guard": "g",
            "memory": {"inUseBytes": in_use},
            "rayObjects": {"objects": sum(n for n, _ in sites.values()), "recordedSites": recorded,
                           "callSites": [{"callSite": s, "count": n, "bytes": b} for s, (n, b) in sites.items()]},
            "processes": {"processes": [{"pid": pid, "cmdline": cmd, "ussBytes": uss} for pid, cmd, uss in procs]}}


SERVE, ETL = "(put object) | /app/serve.py:handle:42", "(task call) | /app/etl.py:run:7"
BEFORE = _artifact("w-1", "2026-12-01T10:00:00Z", 900 * MIB, {SERVE: (100, 100 * MIB), ETL: (5, MIB)},
                   [(11, "ray::Serve.handle", 300 * MIB), (12, "raylet", 40 * MIB)])
AFTER = _artifact("w-2", "2026-12-01T14:00:00Z", 2100 * MIB,
                  {SERVE: (900, 900 * MIB), ETL: (5, MIB), "(put object) | /app/cache.py:put:9": (40, 80 * MIB)},
                  [(71, "ray::Serve.handle", 700 * MIB), (72, "raylet", 41 * MIB)])


def test_the_suspects_are_ranked_by_what_grew() -> None:
    d = forensics_diff.diff(BEFORE, AFTER)
    assert [g.what for g in d.call_sites] == ["(put object) | /app/serve.py:handle:42",
                                              "(put object) | /app/cache.py:put:9"]  # etl.py did not grow
    assert (d.call_sites[0].count_grown, d.call_sites[0].bytes_grown) == (800, 800 * MIB)
    assert [g.what for g in d.processes] == ["ray::Serve.handle", "raylet"]  # matched by command, not PID
    assert d.processes[0].bytes_grown == 400 * MIB and d.memory_grown == 1200 * MIB and not d.unrecorded


def test_unrecorded_call_sites_are_said() -> None:
    out = io.StringIO()
    forensics_diff.render(forensics_diff.diff(BEFORE, {**AFTER, "rayObjects": {
        "objects": 10, "recordedSites": 0, "callSites": []}}), out)
    assert "RAY_record_ref_creation_sites=1" in out.getvalue()


def test_the_command_diffs_two_saved_artifacts(tmp_path: Path) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(BEFORE))
    new.write_text(json.dumps([AFTER]))  # as `forensics --guard G --json` saves them
    out = io.StringIO()
    assert forensics_cli.main(["--diff", str(old), str(new)], out=out) == 0
    text = out.getvalue()
    lines = text.splitlines()
    first_site = next(i for i, line in enumerate(lines) if "CALL SITE" in line) + 1
    assert "serve.py:handle:42" in lines[first_site] and "+800" in lines[first_site]
    assert "memory in use: 900 MiB -> 2.1 GiB (+1.2 GiB)" in text, text
    assert "ray::Serve.handle" in text and "etl.py" not in text


def test_the_diff_of_two_artifacts_make_real_leak_kept_names_the_leak() -> None:
    """Two artifacts ``benchmarks/real_leak.py`` kept of a real Ray (the
    actor that pins a Plasma object and grows a list at each request), 45 s
    apart, as the operator's collection takes them: the line that puts the
    leaked objects and the actor's process come first."""
    kept = Path(__file__).resolve().parents[2] / "examples" / "recorded" / "evidence"
    docs = [json.loads((kept / f"evidence-{n}.json").read_text()) for n in (1, 2)]
    d = forensics_diff.diff(docs[0], docs[1])
    assert d.call_sites[0].what == "(put object) | <string>:handle:15" and d.call_sites[0].count_grown > 0
    assert d.processes[0].what.startswith("ray::Session") and d.processes[0].bytes_grown > 100 * MIB
    out = io.StringIO()
    forensics_diff.render(d, out)
    assert "<string>:handle:15" in out.getvalue()
