"""Start-up failures are one clear line and a non-zero exit, never a traceback; a catalog leaves out what it
cannot serve."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from cli_helpers import serve_fails, start
from gguf_util import cache, demo_dir, make_gguf  # noqa: F401 — the conversion cache of each test, the demo model

import tinytitan.engine.group.follower as group_follower
import tinytitan.serve as serve_mod
from tinytitan.flags import build_parser
from tinytitan.models import gguf
from tinytitan.models.resolve import ModelNotFound, list_models, resolve

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("damage", ["header", "data", "not-gguf"])
def test_a_damaged_gguf_is_refused_by_name(tmp_path, demo_dir, damage):
    path, _, _ = make_gguf(tmp_path / "m.gguf", demo_dir)
    data = path.read_bytes()
    path.write_bytes({"header": data[:3000], "data": data[:-100_000], "not-gguf": b"\0" * 5000}[damage])
    with pytest.raises(ModelNotFound, match="m.gguf"):
        resolve(str(path))  # --gguf-form auto (the default) reads the header before check() did
    with pytest.raises(gguf.UnsupportedGGUF):
        gguf.ensure_converted(path, "float32")


def test_a_catalog_leaves_out_a_damaged_gguf(tmp_path, demo_dir):
    root = tmp_path / "models"
    root.mkdir()
    make_gguf(root / "good.gguf", demo_dir)
    (root / "partial.gguf").write_bytes((root / "good.gguf").read_bytes()[:3000])  # a download cut short
    assert [m.model_id for m in list_models(root, "float32")] == ["good"]


def test_a_port_in_use_is_one_line(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text('["hi"]')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        done = serve_fails(tmp_path, "--script", str(script), "--port", str(s.getsockname()[1]))
    assert "cannot listen on 127.0.0.1:" in done.stderr and "in use" in done.stderr


@pytest.mark.parametrize("args, named", [
    (["--port", "70000"], "70000 is not a port"),
    (["--host", "not-an-address", "--allow-remote", "--port", "0"], "--host not-an-address is not an address"),
    (["--max-queue", "-1", "--port", "0"], "--max-queue: -1 is not 0 or more"),
])
def test_bad_network_flags_are_named(tmp_path, args, named):
    script = tmp_path / "s.yaml"
    script.write_text('["hi"]')
    assert named in serve_fails(tmp_path, "--script", str(script), *args).stderr


def test_a_state_url_of_another_database_is_refused_not_made_a_directory(tmp_path):
    (tmp_path / "s.yaml").write_text('["Hi."]')
    done = subprocess.run([sys.executable, "-m", "tinytitan", "serve", "--script", str(tmp_path / "s.yaml"),
                           "--state", "mysql://user:secret@db/state", "--port", "0"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "only postgresql://" in done.stderr and "secret" not in done.stderr
    assert not (tmp_path / "mysql:").exists()


@pytest.mark.parametrize("args, named", [(["--responses-retention-days", "nan"], "--responses-retention-days"),
                                         # (a negative bound evicted every other stored response at each write)
                                         (["--responses-max-mib", "-1"], "--responses-max-mib: -1 is not 0 or more"),
                                         (["--reasoning-effort", "bogus"], "--reasoning-effort")])
def test_bad_defaults_are_named_at_start(tmp_path, args, named):
    (tmp_path / "s.yaml").write_text('["Hi."]')
    assert named in serve_fails(tmp_path, "--script", str(tmp_path / "s.yaml"), "--port", "0", *args).stderr


def test_a_missing_script_is_one_line(tmp_path):
    assert "--script" in serve_fails(tmp_path, "--script", str(tmp_path / "absent.yaml"), "--port", "0").stderr


@pytest.mark.parametrize("damage", ["truncated-weights", "bad-config", "no-weights"])
def test_a_model_directory_that_cannot_load_is_one_line(tmp_path, demo_dir, damage):
    model = tmp_path / "m"
    shutil.copytree(demo_dir, model)
    w = model / "model.safetensors"
    if damage == "truncated-weights":
        w.write_bytes(w.read_bytes()[: w.stat().st_size // 2])
    elif damage == "bad-config":
        (model / "config.json").write_text("{")
    else:
        w.unlink()
    done = serve_fails(tmp_path, "--model", str(model), "--port", "0")
    assert "cannot load the model m from" in done.stderr


def test_a_model_without_a_chat_template_is_refused_at_start_not_500_per_request(tmp_path, demo_dir):
    model = tmp_path / "base"
    shutil.copytree(demo_dir, model)
    tc = json.loads((model / "tokenizer_config.json").read_text())
    del tc["chat_template"]
    (model / "tokenizer_config.json").write_text(json.dumps(tc))
    assert "no chat template" in serve_fails(tmp_path, "--model", str(model), "--port", "0").stderr


def test_a_catalog_with_a_damaged_model_still_lists_the_others(tmp_path, demo_dir):
    import httpx

    root = tmp_path / "models"
    shutil.copytree(demo_dir, root / "ok")
    shutil.copytree(demo_dir, root / "garbage")
    (root / "garbage" / "model.safetensors").write_bytes(os.urandom(5000))
    shutil.copytree(demo_dir, root / "badconfig")
    (root / "badconfig" / "config.json").write_text("{")
    proc, _, base, _ = start(["--models-dir", str(root), "--state", str(tmp_path / "state"),
                              "--prompt-cache-dir", "off"])
    try:
        r = httpx.get(base + "/v1/models")
        assert r.status_code == 200, r.text
        assert "ok" in [m["id"] for m in r.json()["data"]]
        assert httpx.get(base + "/api/tags").status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)


def test_launch_port_0_picks_a_free_port(tmp_path):
    script = tmp_path / "s.yaml"
    script.write_text('["hi"]')
    env = {**os.environ, "HOME": str(tmp_path), "TINYTITAN_CACHE": str(tmp_path / "tt"),
           "XDG_STATE_HOME": str(tmp_path / "state"), "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "tinytitan", "launch", "pi", "--port", "0", "--script",
                           str(script), "--prompt-cache-dir", "off", "--print"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=90, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    assert "pi --model tinytitan/tinytitan-scripted" in done.stdout


def test_launch_port_0_hands_the_agent_the_port_its_server_bound(tmp_path, monkeypatch, capsys):
    """With --port 0 the server launch starts binds a free port itself: a port launch picked and passed on could
    be taken before the server binds it (here: the pick a port picker would make is held by another socket), and
    two launches at once would race for it. The agent is given the port bound, and the printed line names it."""
    from tinytitan.launch import command

    script = tmp_path / "s.yaml"
    script.write_text('["hi"]')
    for var, sub in [("HOME", ""), ("TINYTITAN_CACHE", "tt"), ("XDG_STATE_HOME", "state")]:
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    held = socket.socket()  # (bound, not listening: nothing answers there, and no server can bind it)
    held.bind(("127.0.0.1", 0))
    held_port = held.getsockname()[1]
    monkeypatch.setattr(command, "_free_port", lambda: held_port, raising=False)
    try:
        rc = command.main(["pi", "--port", "0", "--script", str(script), "--prompt-cache-dir", "off", "--print"])
    finally:
        held.close()
    out, err = capsys.readouterr()
    assert rc == 0, err
    served = re.search(r"tinytitan serve .*--port (\d+)$", out, re.M)
    assert served and int(served.group(1)) not in (0, held_port), out
    port = int(served.group(1))
    assert f"tinytitan serve is listening on http://127.0.0.1:{port}" in err
    models = json.loads((tmp_path / "tt" / "launch" / "pi" / "agent" / "models.json").read_text())
    assert models["providers"]["tinytitan"]["baseUrl"] == f"http://127.0.0.1:{port}/v1", models


# A follower rank of an mlx.launch group never listens on HTTP (rank 0 does): the same serve line every rank is
# started with must not stop a follower over rank 0's --port or --host.
def test_a_follower_rank_is_not_stopped_by_the_port_only_rank_0_binds(monkeypatch):
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()  # (on the follower's host, the port rank 0 serves on is some other program's)
    port = taken.getsockname()[1]
    monkeypatch.setenv("MLX_RANK", "1")
    follower = SimpleNamespace(leader=False, rank=1)
    reached = []
    monkeypatch.setattr(serve_mod, "join_group", lambda args: reached.append("join") or follower)
    monkeypatch.setattr(serve_mod, "make_backends", lambda args: {})
    monkeypatch.setattr(group_follower, "follow",
                        lambda group, backends, max_batch, timeout=None: reached.append("follow"))
    args = build_parser().parse_args(["serve", "--port", str(port), "--prompt-cache-dir", "off"])
    try:
        assert serve_mod.serve(args) == 0
    finally:
        taken.close()
    assert reached == ["join", "follow"]


def test_a_follower_rank_is_not_stopped_by_rank_0s_host_address(monkeypatch):
    monkeypatch.setenv("MLX_RANK", "1")
    follower = SimpleNamespace(leader=False, rank=1)
    monkeypatch.setattr(serve_mod, "join_group", lambda args: follower)
    monkeypatch.setattr(serve_mod, "make_backends", lambda args: {})
    monkeypatch.setattr(group_follower, "follow", lambda group, backends, max_batch, timeout=None: None)
    # 192.0.2.1 (TEST-NET-1): rank 0's LAN address, which is no address of the follower's machine
    args = build_parser().parse_args(["serve", "--host", "192.0.2.1", "--allow-remote", "--port", "8080",
                                      "--prompt-cache-dir", "off"])
    assert serve_mod.serve(args) == 0


def with_template(tmp_path, demo_dir, name: str, template: str) -> Path:
    model = tmp_path / name
    shutil.copytree(demo_dir, model)
    tc = json.loads((model / "tokenizer_config.json").read_text())
    tc["chat_template"] = template
    (model / "tokenizer_config.json").write_text(json.dumps(tc))
    return model


BROKEN_TEMPLATES = {  # each fails on every conversation: found at start, not as a 400 on every request
    "syntax": ("{% for m in messages %}{{ m.content }}", "Unexpected end of template"),
    "raises": ("{{ raise_exception('this template is a stub') }}", "this template is a stub"),
    "type": ("{{ messages[0].content + 1 }}{% if add_generation_prompt %}>{% endif %}", "TypeError"),
}
# refuses a system message (as Gemma's first templates did) and nothing else: served (the family folds a system
# message into the first user turn for it)
REFUSES_SYSTEM = ("{% if messages[0].role == 'system' %}{{ raise_exception('System role not supported') }}"
                  "{% endif %}{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
                  "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


@pytest.mark.parametrize("kind", list(BROKEN_TEMPLATES))
def test_a_chat_template_that_renders_nothing_is_refused_at_start(tmp_path, demo_dir, kind):
    template, named = BROKEN_TEMPLATES[kind]
    model = with_template(tmp_path, demo_dir, "m", template)
    said = serve_fails(tmp_path, "--model", str(model), "--port", "0").stderr
    assert "cannot serve the model m" in said and "chat template" in said and named in said, said[-2000:]


def test_a_catalog_leaves_out_a_model_whose_template_renders_nothing(tmp_path, demo_dir):
    import httpx

    root = tmp_path / "models"
    shutil.copytree(demo_dir, root / "ok")
    with_template(root, demo_dir, "stub", BROKEN_TEMPLATES["raises"][0])
    with_template(root, demo_dir, "nosystem", REFUSES_SYSTEM)
    proc, _, base, said = start(["--models-dir", str(root), "--state", str(tmp_path / "state"),
                                 "--prompt-cache-dir", "off"])
    try:
        assert sorted(m["id"] for m in httpx.get(base + "/v1/models").json()["data"]) == ["nosystem", "ok"]
        assert "stub: not served:" in said and "this template is a stub" in said, said
        ask = {"model": "nosystem", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
        assert httpx.post(base + "/v1/chat/completions", json=ask, timeout=60).status_code == 200
        ask["messages"].insert(0, {"role": "system", "content": "Be brief."})
        assert httpx.post(base + "/v1/chat/completions", json=ask, timeout=60).status_code == 200
    finally:
        proc.terminate()
        proc.wait(10)
