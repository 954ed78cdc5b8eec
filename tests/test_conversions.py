"""Converted GGUF models are bounded on disk (models/conversions.py): those of an earlier converter version are
removed, and past ``--conversions-mib`` the least recently used go — never one this server uses."""

from __future__ import annotations

import logging
import os

import pytest

from tinytitan import flags
from tinytitan.models import conversions, gguf

MIB = 1 << 20


@pytest.fixture(autouse=True)
def fresh(monkeypatch, tmp_path):
    """A cache of this test's own, nothing used yet, the default budget."""
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(conversions, "_in_use", set())
    monkeypatch.setattr(conversions, "_max_bytes", conversions.DEFAULT_MIB * MIB)


def conversion(root, name, mib, age_s):
    d = root / name
    d.mkdir(parents=True)
    (d / "config.json").write_text("{}")
    (d / "model.safetensors").write_bytes(b"\0" * (mib * MIB))
    t = 1_700_000_000 - age_s
    os.utime(d, (t, t))
    return d


def test_least_recently_used_go_past_the_budget_and_stale_versions_always(tmp_path, caplog):
    root = tmp_path / "cache" / "gguf"
    stale = conversion(root, "m-0123456789abcdef-v3-float32", 1, 10)
    oldest = conversion(root, "a-0123456789abcdef-v4-float32", 3, 300)
    newer = conversion(root, "b-0123456789abcdef-v4-quantized", 2, 200)
    target = conversion(root, "c-0123456789abcdef-t01234567-v4-float16", 1, 400)
    writing = conversion(root, ".d-0123456789abcdef-v4-float32.x1y2.tmp", 5, 500)  # another process converts
    (root / "digests.json").write_text("{}")
    conversions.configure(4 * MIB)
    with caplog.at_level(logging.INFO, logger="tinytitan.gguf"):
        conversions.used(target, 4)
    assert not stale.exists() and "earlier converter (v3; now v4)" in caplog.text
    # 3 + 2 + 1 MiB over 4: the least recently used goes (the one just used is the most recent)
    assert not oldest.exists() and newer.exists() and target.exists()
    assert "least recently used" in caplog.text and str(oldest) in caplog.text
    assert writing.exists() and (root / "digests.json").exists()
    assert sorted(p.name for p in root.iterdir()) == sorted([newer.name, target.name, writing.name, "digests.json"])


def test_a_conversion_in_use_is_never_removed(tmp_path, caplog):
    root = tmp_path / "cache" / "gguf"
    conversions.configure(0)
    first = conversion(root, "a-0123456789abcdef-v4-float32", 2, 300)
    conversions.used(first, 4)  # a catalog's two models, converted one after the other: both served here
    second = conversion(root, "b-0123456789abcdef-v4-float32", 2, 200)
    with caplog.at_level(logging.WARNING, logger="tinytitan.gguf"):
        conversions.used(second, 4)
    assert first.exists() and second.exists()
    assert "over the 0 MiB budget" in caplog.text


def test_converting_again_removes_the_earlier_versions_copy(tmp_path, monkeypatch):
    from gguf_util import make_gguf
    from tinytitan.demo_model import ensure_demo_model

    path, _, _ = make_gguf(tmp_path / "m.gguf", ensure_demo_model())
    monkeypatch.setattr(gguf, "CONVERTER_VERSION", gguf.CONVERTER_VERSION - 1)
    old = gguf.ensure_converted(path, "quantized")
    assert (old / "config.json").is_file()
    monkeypatch.setattr(gguf, "CONVERTER_VERSION", gguf.CONVERTER_VERSION + 1)
    new = gguf.ensure_converted(path, "quantized")
    assert new != old and (new / "config.json").is_file() and not old.exists()
    assert [p.name for p in new.parent.iterdir() if p.is_dir()] == [new.name]


def test_the_flag():
    args = flags.build_parser().parse_args(["serve"])
    assert args.conversions_mib == conversions.DEFAULT_MIB
    assert flags.build_parser().parse_args(["serve", "--conversions-mib", "100"]).conversions_mib == 100
