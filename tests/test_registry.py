"""Registries fill themselves from their modules on first use; a grouped registry imports only the
group a filtered lookup names (what keeps `kbvqa score infoseek` from importing the judge stack)."""

from __future__ import annotations

import sys

import pytest

from kbvqa.registry import Registry, UnknownName


@pytest.fixture
def plugin_modules(tmp_path, monkeypatch):
    """Two throwaway modules that register into `REG` of a third one, importable from tmp_path."""
    (tmp_path / "regtest_reg.py").write_text("from kbvqa.registry import Registry\nREG = None\n", encoding="utf-8")
    for fam, names in (("alpha", ("a1", "a2")), ("beta", ("b1",))):
        body = "import regtest_reg\n" + "".join(
            f"regtest_reg.REG.add({n!r}, {n!r}, family={fam!r})\n" for n in names)
        (tmp_path / f"regtest_{fam}.py").write_text(body, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import regtest_reg

    yield regtest_reg
    for m in ("regtest_reg", "regtest_alpha", "regtest_beta"):
        sys.modules.pop(m, None)


def test_a_filtered_lookup_imports_only_its_group(plugin_modules):
    reg = plugin_modules.REG = Registry("regtest", group_by="family",
                                        modules={"alpha": ("regtest_alpha",), "beta": ("regtest_beta",)})
    assert reg.names(family="alpha") == ["a1", "a2"]
    assert "regtest_alpha" in sys.modules and "regtest_beta" not in sys.modules
    assert reg.entry("a2").info == {"family": "alpha"}  # already registered: nothing more is imported
    assert "regtest_beta" not in sys.modules
    assert reg.entry("b1").obj == "b1"  # not registered yet: every group is imported to find it
    assert "regtest_beta" in sys.modules
    assert reg.names() == ["a1", "a2", "b1"] and len(reg) == 3
    with pytest.raises(UnknownName, match="known: a1, a2, b1"):
        reg.entry("zz")


def test_an_unfiltered_lookup_imports_every_group(plugin_modules):
    reg = plugin_modules.REG = Registry("regtest", group_by="family",
                                        modules={"alpha": ("regtest_alpha",), "beta": ("regtest_beta",)})
    assert "b1" in reg
    assert reg.names(family="beta") == ["b1"] and reg.names(family="gamma") == []


def test_grouped_modules_and_group_by_go_together():
    with pytest.raises(ValueError, match="group_by"):
        Registry("x", modules={"a": ("m",)})
    with pytest.raises(ValueError, match="group_by"):
        Registry("x", modules=("m",), group_by="family")


def test_metrics_of_one_family_leave_the_others_unimported():
    import json
    import subprocess

    code = ("import sys, json\nfrom kbvqa.evaluate import infoseek_modes\nmodes = infoseek_modes()\n"
            "print(json.dumps([modes, 'kbvqa.evaluate.judge' in sys.modules, 'kbvqa.evaluate.ivr12' in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    modes, judge_loaded, ivr12_loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert modes == ["official", "strict", "reward"]
    assert not judge_loaded and not ivr12_loaded


def test_a_built_in_of_a_group_imported_after_the_plugins_still_wins(plugin_modules, monkeypatch):
    """Plugins load with the first lookup; a plugin named like a built-in of a group not imported yet
    is replaced when that group is (built-ins took precedence when every group loaded up front)."""
    import kbvqa.registry as registry

    class EP:
        def __init__(self, name, obj):
            self.name, self._obj = name, obj

        def load(self):
            return self._obj

    monkeypatch.setattr(registry.metadata, "entry_points",
                        lambda group: [EP("b1", "plugin-b1"), EP("p1", "plugin-p1")] if group == "kbvqa.regtest" else [])
    reg = plugin_modules.REG = Registry("regtest", group_by="family",
                                        modules={"alpha": ("regtest_alpha",), "beta": ("regtest_beta",)})
    assert reg.names(family="alpha") == ["a1", "a2"]
    assert reg.get("p1") == "plugin-p1"
    assert reg.get("b1") == "b1"  # the lookup imports beta, whose built-in replaces the plugin
    assert reg.names() == ["a1", "a2", "b1", "p1"]
