"""The operator's MEMORYGUARD_* variables: one table (config.ENV) that the
settings, the command's flags, the chart and the docs all agree with."""

from __future__ import annotations

import dataclasses
import re

import pytest

from memoryguard_kuberay.operator import config

from ..devworld import ROOT

MARK = "<!-- operator variables: generated from config.ENV, do not edit -->\n"


def test_the_docs_table_is_generated_from_the_table() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    start = doc.index(MARK) + len(MARK)
    end = doc.index("<!-- end of the operator variables -->")
    assert doc[start:end] == config.docs_table(), "run: python -m memoryguard_kuberay.operator.config"


def test_every_variable_the_chart_sets_is_in_the_table() -> None:
    chart = "".join(p.read_text() for p in (ROOT / "charts" / "memoryguard" / "templates").glob("*.yaml"))
    set_by_chart = set(re.findall(r"name: MEMORYGUARD_([A-Z_]+)", chart))
    assert set_by_chart and set_by_chart <= {s.name for s in config.ENV}, set_by_chart


def test_no_variables_means_the_tables_defaults() -> None:
    cfg = config.from_env({})
    for f in dataclasses.fields(config.OperatorConfig):
        if f.name != "trust":
            assert getattr(cfg, f.name) == f.default, f.name
    assert cfg.metrics_port == 8080 and cfg.drain is True and cfg.epoch is None and cfg.trust.policy_port is None


@pytest.mark.parametrize("name, raw, says", [
    ("METRICS_PORT", "abc", "MEMORYGUARD_METRICS_PORT='abc': not a whole number"),
    ("METRICS_PORT", "70000", "must be within [0, 65535]"),
    ("DRAIN", "maybe", "MEMORYGUARD_DRAIN='maybe': must be true or false"),
    ("TIME_SCALE", "0", "must be within [0.001, 1e+06]"),
    ("POLICY_SIDECAR_PORT", "0", "MEMORYGUARD_POLICY_SIDECAR_PORT='0': must be within [1, 65535]"),
])
def test_a_bad_variable_is_named_with_what_it_takes(name: str, raw: str, says: str) -> None:
    with pytest.raises(config.ConfigError, match=re.escape(says)):
        config.from_env({f"MEMORYGUARD_{name}": raw})


def test_variables_are_read_into_their_settings() -> None:
    cfg = config.from_env({"MEMORYGUARD_METRICS_PORT": "0", "MEMORYGUARD_DRAIN": "no", "MEMORYGUARD_EPOCH": "100",
                           "MEMORYGUARD_JEMALLOC_PATHS": "/a.so, /b.so", "MEMORYGUARD_POLICY_SIDECAR_PORT": "9200"})
    assert (cfg.metrics_port, cfg.drain, cfg.epoch) == (0, False, 100.0)
    assert cfg.trust.jemalloc_paths == ("/a.so", "/b.so") and cfg.trust.policy_port == 9200


def test_the_commands_flags_take_their_defaults_from_the_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MEMORYGUARD_LEASE_NAME", raising=False)
    assert config.env("LEASE_NAME") == "memoryguard-operator"
    monkeypatch.setenv("MEMORYGUARD_LEASE_NAME", "mine")
    assert config.env("LEASE_NAME") == "mine"
