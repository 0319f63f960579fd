"""Tenant names: no team id, key or hand-named tenant can take another tenant's name, since a
tenant's name is the prefix of its sessions' keys."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from middleware import ConfigError, load_config
from middleware.config.service import ApiKey, tenant_name


def _tenant_of(**key: str) -> str | None:
    pytest.importorskip("litellm")
    from middleware.adapters.litellm_proxy import tenant_of

    return tenant_of(SimpleNamespace(**key))


def test_a_team_is_named_by_its_id_when_it_can_appear_in_key_names() -> None:
    assert _tenant_of(team_id="ops", token="sk-1") == "team-ops"
    assert _tenant_of(team_id="ops", token="sk-2") == "team-ops"  # keys of one team share it


def test_a_team_id_that_cannot_appear_in_key_names_is_digested() -> None:
    assert _tenant_of(team_id="ops:east") == tenant_name("ops:east", "team")


def test_a_team_id_of_the_digested_form_cannot_take_another_teams_tenant() -> None:
    other = tenant_name("ops:east", "team")  # team-<16 hex>
    forged = other.removeprefix("team-")
    assert _tenant_of(team_id=forged) != other
    assert _tenant_of(team_id=forged) == tenant_name(forged, "team")


def test_a_key_without_a_team_is_named_by_its_digest_never_by_the_key() -> None:
    tenant = _tenant_of(token="sk-secret")
    assert tenant == tenant_name("sk-secret") and "sk-secret" not in str(tenant)
    assert _tenant_of() is None


@pytest.mark.parametrize("name", [tenant_name("sk-other"), tenant_name("x", "team")])
def test_a_tenant_named_by_hand_cannot_take_the_digested_form(tmp_path: Path, name: str) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(f"serve:\n  api_keys:\n    - {{key: k-1, tenant: {name}}}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert name in str(caught.value) and "digested" in str(caught.value) and "k-1" not in str(caught.value)


def test_names_near_the_digested_form_are_tenants() -> None:
    for name in (
        "acme",
        "key-acme",
        "key-0123456789abcde",
        "key-0123456789ABCDEF",
        "team-0123456789abcdef0",
        "acme-0123456789abcdef",
    ):
        assert ApiKey(key="k", tenant=name).tenant == name
