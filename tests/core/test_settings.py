"""PolicySettings from a MemoryGuard spec: defaults, units, every problem
reported at once."""

from __future__ import annotations

import pytest

from memoryguard_kuberay.core.schema import crd_property
from memoryguard_kuberay.core.settings import POLICY_FIELDS, PolicySettings, SettingsError


def test_defaults_match_table() -> None:
    s = PolicySettings.from_spec({})
    for f in POLICY_FIELDS:
        assert getattr(s, f.attr) == f.held_default


def test_percent_fields_become_fractions() -> None:
    s = PolicySettings.from_spec({"policy": {"criticalPercent": 90, "minGrowthPercentPerHour": 1}})
    assert s.critical_fraction == 0.9 and s.min_growth_fraction_per_h == 0.01


@pytest.mark.parametrize(
    "spec, says",
    [
        ({"policy": {"criticalPercent": 120}}, "criticalPercent: 120 is outside [50, 100]"),
        ({"policy": {"horizonSeconds": "2h"}}, "horizonSeconds: must be a number"),
        ({"policy": {"horizonSeconds": 10.5}}, "must be a whole number"),
        ({"rotation": {"enabled": "yes"}}, "enabled: must be true or false"),
        ({"rotation": {"maxUnavailabel": 1}}, "maxUnavailabel: unknown setting"),
        ({"policy": {"trendMinSpanSeconds": 20000, "trendWindowSeconds": 10000}}, "must not exceed"),
        ({"policy": "fast"}, "spec.policy must be an object"),
    ],
)
def test_bad_specs(spec: dict, says: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(SettingsError) as exc:
        PolicySettings.from_spec(spec)
    assert any(says in p for p in exc.value.problems), exc.value.problems


def test_all_problems_at_once() -> None:
    with pytest.raises(SettingsError) as exc:
        PolicySettings.from_spec({"policy": {"criticalPercent": 5, "horizonSeconds": 1}})
    assert len(exc.value.problems) == 2


def test_crd_properties_in_spec_units() -> None:
    props = {f.name: crd_property(f) for f in POLICY_FIELDS if f.section == "policy"}
    assert props["criticalPercent"] == {**props["criticalPercent"], "type": "number", "default": 95,
                                        "minimum": 50, "maximum": 100}
    assert props["horizonSeconds"]["type"] == "integer" and props["horizonSeconds"]["default"] == 5400


def test_docs_list_every_setting() -> None:
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "how-it-works.md").read_text()
    for f in POLICY_FIELDS:
        assert f"`spec.{f.path}`" in doc, f"{f.name} is not documented"
