"""The generic registry: lookup, clear errors, decorator registration, plugins through entry points."""

from __future__ import annotations

import importlib.metadata
import sys
import types

import pytest

from storage_kernels import registry
from storage_kernels.registry import Registry


def test_register_get_and_names_in_order() -> None:
    reg: Registry[int] = Registry("thing.kind")
    reg.register("one", 1)

    @reg.register("two")
    def two() -> int:
        return 2

    assert reg.get("one") == 1 and reg.get("two") is two
    assert reg.names() == ("one", "two") and list(reg) == ["one", "two"] and len(reg) == 2
    assert "one" in reg and "three" not in reg
    assert reg.unregister("one") == 1 and reg.names() == ("two",)


def test_unknown_and_duplicate_names_are_clear_errors() -> None:
    reg: Registry[int] = Registry("partition.method")
    reg.register("range", 1)
    with pytest.raises(ValueError, match=r"'partition.method' expected one of range \(got 'kahip'\)"):
        reg.get("kahip")
    with pytest.raises(ValueError, match=r"expected a new name \(got 'range', already registered\)"):
        reg.register("range", 2)
    reg.register("range", 2, replace=True)
    assert reg.get("range") == 2
    with pytest.raises(ValueError, match="non-empty name"):
        reg.register(" padded ", 3)
    with pytest.raises(KeyError):
        reg.unregister("missing")


def test_plugins_register_through_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry[str] = Registry("demo.kind")
    module = types.ModuleType("strata_demo_plugin")
    module.__dict__["reg"] = reg
    exec("reg.register('from-plugin', 'hello')", module.__dict__)  # what importing a plugin module does
    monkeypatch.setitem(sys.modules, "strata_demo_plugin", module)
    point = importlib.metadata.EntryPoint(name="demo", value="strata_demo_plugin", group=registry.PLUGIN_GROUP)
    monkeypatch.setattr(registry.importlib.metadata, "entry_points",
                        lambda group: [point] if group == registry.PLUGIN_GROUP else [])
    assert registry.load_plugins(force=True) == ["demo"]
    assert reg.get("from-plugin") == "hello"


def test_a_broken_plugin_is_an_error_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    point = importlib.metadata.EntryPoint(name="broken", value="strata_no_such_module_xyz", group=registry.PLUGIN_GROUP)
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [point])
    with pytest.raises(ImportError, match="entry point 'broken'"):
        registry.load_plugins(force=True)
    monkeypatch.setattr(registry.importlib.metadata, "entry_points", lambda group: [])
    registry.load_plugins(force=True)


def _provider(tmp_path, monkeypatch: pytest.MonkeyPatch, name: str, body: str) -> None:
    """A module ``name`` on ``sys.path`` whose import runs ``body`` (with ``reg`` bound to the registry)."""
    (tmp_path / f"{name}.py").write_text(f"from {__name__} import PROVIDED as reg\n{body}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


PROVIDED: Registry[str] = Registry("unused")  # the providers below register into whatever the test binds here


def test_declared_names_check_without_importing_the_provider(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry[str] = Registry("train.model", provider="strata_toy_provider")
    reg.declare("sage", "gat")
    monkeypatch.setattr(sys.modules[__name__], "PROVIDED", reg)
    _provider(tmp_path, monkeypatch, "strata_toy_provider", "reg.register('sage', 'S')\nreg.register('gat', 'G')")
    reg.check("gat")
    assert "strata_toy_provider" not in sys.modules  # a declared name needs no import
    with pytest.raises(ValueError, match=r"'train.model' expected one of sage, gat \(got 'mlp'\)"):
        reg.check("mlp")  # an unknown one imports the provider, then lists what it registered
    assert "strata_toy_provider" in sys.modules and reg.get("sage") == "S" and reg.names() == ("sage", "gat")


def test_a_provider_missing_a_declared_name_is_an_error(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    reg: Registry[str] = Registry("train.model", provider="strata_short_provider")
    reg.declare("sage", "gat")
    monkeypatch.setattr(sys.modules[__name__], "PROVIDED", reg)
    _provider(tmp_path, monkeypatch, "strata_short_provider", "reg.register('sage', 'S')")
    with pytest.raises(ImportError, match=r"strata_short_provider to register the declared names gat \(it "
                                          r"registered sage\)"):
        reg.get("sage")
