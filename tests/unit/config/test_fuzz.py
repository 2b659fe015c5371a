"""Arbitrary file text and values give valid settings or the project's ConfigError, nothing else."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from overdrive.config import schema, sources
from overdrive.config.resolve import resolve
from overdrive.config.settings import Settings
from overdrive.errors import ConfigError

KEYS = [s.key.rsplit(".", 1)[-1] for s in schema.SETTINGS] + list(schema.SECTIONS)

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["yes", "no", "all", "0,1", "fp16", "FULL_SHARD", "inf", "nan", "3"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), inner, max_size=4),
    ),
    max_leaves=12,
)
documents = st.dictionaries(
    st.one_of(st.sampled_from(KEYS), st.text(max_size=10)), values, max_size=6
)


def _load(text: str, name: str) -> Settings | None:
    try:
        return resolve(file=sources.parse_config_text(text, Path(name)))
    except ConfigError:
        return None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=200), st.sampled_from(["cfg.yaml", "cfg.json", "cfg"]))
def test_arbitrary_text(text: str, name: str) -> None:
    result = _load(text, name)
    assert result is None or isinstance(result, Settings)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents)
def test_arbitrary_values_as_yaml_and_json(document: dict) -> None:
    text = yaml.safe_dump(document)
    result = _load(text, "cfg.yaml")
    assert result is None or isinstance(result, Settings)
    try:
        json_text = json.dumps(document)
    except ValueError:
        return
    result = _load(json_text, "cfg.json")
    assert result is None or isinstance(result, Settings)


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(schema.by_env())), st.text(max_size=12), max_size=5))
def test_arbitrary_environment(environ: dict[str, str]) -> None:
    try:
        result = resolve(env=sources.read_env(environ))
    except ConfigError:
        return
    assert isinstance(result, Settings)
