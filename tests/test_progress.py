"""Long work shows progress: a tqdm bar on a terminal, a plain log line per stage otherwise
(tinytitan/progress.py), for the demo model's build and a Hugging Face download; the GGUF conversion's lines
are checked in tests/test_gguf_types.py."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from tinytitan.progress import Progress, on_terminal

log = logging.getLogger("tinytitan.test_progress")


def test_lines_when_not_on_a_terminal(monkeypatch, caplog, capsys):
    monkeypatch.setenv("TINYTITAN_PROGRESS", "lines")
    caplog.set_level(logging.INFO, logger=log.name)
    with Progress(log, "copying", total=4, every=0) as p:
        p.stage("the first half")
        p.update(2)
        p.update(2)
    text = caplog.text
    for line in ("copying …", "copying: the first half", "copying:  50%", "copying: 100%", "copying: done in"):
        assert line in text, text
    assert capsys.readouterr().err == ""  # nothing drawn


def test_a_bar_on_a_terminal(monkeypatch, caplog, capsys):
    monkeypatch.setenv("TINYTITAN_PROGRESS", "bar")
    assert on_terminal()
    caplog.set_level(logging.INFO, logger=log.name)
    with Progress(log, "loading m", total=2048, unit="B") as p:
        p.update(1024)
        p.update(1024)
    err = capsys.readouterr().err
    assert "loading m: 100%|" in err and "2.00k/2.00k" in err, err
    assert caplog.text == ""  # the bar says it all


def test_a_failed_piece_of_work_does_not_claim_it_finished(monkeypatch, caplog):
    monkeypatch.setenv("TINYTITAN_PROGRESS", "lines")
    caplog.set_level(logging.INFO, logger=log.name)
    with pytest.raises(RuntimeError):
        with Progress(log, "converting", total=10):
            raise RuntimeError("disk full")
    assert "done in" not in caplog.text


def test_the_demo_model_build_says_its_stages(monkeypatch, caplog, tmp_path):
    from tinytitan.demo_model import build_demo_model

    monkeypatch.setenv("TINYTITAN_PROGRESS", "lines")
    caplog.set_level(logging.INFO, logger="tinytitan.demo_model")
    build_demo_model(tmp_path / "demo")
    text = caplog.text
    for stage in ("training the tokenizer", "writing the configuration", "writing the weights", "done in"):
        assert f"building the demo model in {tmp_path / 'demo'}: {stage}" in text, text


def test_a_download_in_a_log_turns_the_hubs_bars_off_and_says_what_it_came_to(monkeypatch, caplog, tmp_path):
    import huggingface_hub
    from huggingface_hub.utils import are_progress_bars_disabled

    from tinytitan.models import resolve

    seen = {}

    def fake_download(repo_id, cache_dir=None, allow_patterns=None, **kw):
        seen["bars_off"] = are_progress_bars_disabled()
        snap = Path(tmp_path) / "snap"
        snap.mkdir()
        (snap / "model.safetensors").write_bytes(b"\0" * 2_000_000)
        return str(snap)

    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake_download)
    monkeypatch.setenv("TINYTITAN_PROGRESS", "lines")
    caplog.set_level(logging.INFO, logger=resolve.log.name)
    resolve._download("org/name", None)
    assert seen["bars_off"] and not are_progress_bars_disabled()
    assert "downloading org/name from the Hugging Face Hub" in caplog.text
    assert "downloaded org/name: 2 MB in" in caplog.text
