"""``tinytitan launch`` tells each agent that a model which takes images takes them: pi, qwen-code and Aider drop a
picture before it is sent when their settings say text only (pi: "Current model does not support images. The
image will be omitted"; qwen-code: "Unsupported image file … This model does not support image input"; Aider: the
image added to the chat, never sent). Each runs against the scripted backend serving as a vision model
(``--script-images``), behind tools/record_proxy.py, and reads a PNG the way its users do: pi's ``read`` tool and
qwen-code's ``read_file`` (the script calls them), Aider's file on the command line. The picture must reach the
server as a data URL, and the server answer every request."""

from __future__ import annotations

import base64
import json
import re
import shutil

import pytest

import claude_harness as claude
from conftest import absent
from image_helpers import write_png
from launch_helpers import INSTALL, launch
from tinytitan.launch.settings import PROGRAMS

ANSWER = "It is an orange picture."


def turn(agent: str, png) -> tuple[list[str], list[str]]:
    """(the script, the agent's own flags after ``--``) for one turn that reads ``png``."""
    if agent == "pi":
        return [claude.tool_call("read", {"path": png.name}), ANSWER], ["-p", f"look at {png.name}"]
    if agent == "qwen-code":
        return [claude.tool_call("read_file", {"file_path": str(png)}), ANSWER], ["-p", f"look at {png.name}"]
    return [ANSWER], ["--no-git", "--yes-always", "--no-pretty", "--no-fancy-input", png.name,
                      "--message", "describe the picture"]


@pytest.mark.clients
@pytest.mark.parametrize("agent", ["pi", "qwen-code", "aider"])
def test_launch_tells_the_agent_a_vision_model_takes_images(agent, tmp_path):
    if shutil.which(PROGRAMS[agent]) is None:
        absent(f"{agent} (`{PROGRAMS[agent]}`) is not installed: {INSTALL[agent]}")
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    png = write_png(work / "shot.png")
    data_url = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    script, flags = turn(agent, png)
    banner: list = []
    with claude.tinytitan(script, tmp_path, ["--script-images"], banner) as (base, model, record):
        server = banner.pop()
        done = launch([agent, "--port", base.rsplit(":", 1)[1], "--", *flags], home, work, timeout=50)
        log = "".join(server.lines)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert ANSWER in done.stdout + done.stderr
    sent = [r for r in claude.read_record(record) if r["method"] == "POST" and r["path"] == "/v1/chat/completions"]
    assert len(sent) == len(script), [r["body"]["messages"][-1] for r in sent]
    last = json.dumps(sent[-1]["body"])
    assert data_url in last, sent[-1]["body"]["messages"][-2:]  # the picture itself, not the agent's excuse
    assert "not support image" not in last
    statuses = [int(s) for s in re.findall(r"POST /v1/chat/completions (\d{3}) ", log)]
    assert statuses == [200] * len(script), log[-3000:]
