"""Images with the real agents on a VISION model (``tinytitan serve --model demo-vision``: a tiny random-weight
Gemma 3, 256 image tokens per picture). It talks gibberish, so nothing here depends on what it says: each test
drives the agent the way a user attaches a picture, and checks what went over the wire and what the server did.

- Claude Code (2.1.332): ``claude -p "describe @shot.png"``. Claude Code itself Reads a mentioned image file
  (the model cannot be made to call Read: its weights are random) and sends the picture as an ``image`` block in
  the user turn, after its "Called the Read tool" note. The turn completes; ``--continue`` resends the history
  with the picture, and the server reads the whole first prompt from the prompt cache (the answer's entry, or the
  checkpoint at the end of the first prompt where the answer came back as other tokens: those tokens are not
  read again, so the image is not encoded again).
- Codex (0.171): ``codex exec --image shot.png``, with the catalog the server writes (``input_modalities:
  ["text", "image"]``): the picture goes as an ``input_image`` in the user message. And ``view_image``: a random-
  weight model never chooses a call, so the proxy asks for it (``--tool-call``: the first request goes on with a
  forced tool choice, the path narrowed to ``shot.png``) and the server's forced-call grammar makes the model
  write it in Gemma 3's markup; Codex reads the file and sends it back as an ``input_image`` in the call's
  ``function_call_output``, and the next turn reads it.
- opencode (1.18.33), through ``tinytitan launch opencode``: ``opencode run … -f shot.png`` sends an ``image_url``
  part (launch declares the model's image input; without it opencode replaces the picture by an error text).

Each time the server's log line for the request counts the picture: the same request without it has at least 256
tokens fewer (counted by the protocol's count route, where it has one; resent, on Chat). Every reply the server
gave (bodies and stream events) is recorded by tools/record_proxy.py (``--replies``) and validated strictly
against the official SDKs' types (tests/strict.py).
"""

from __future__ import annotations

import base64
import copy
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

import claude_harness as claude
import codex_harness as codex
import image_helpers
from conftest import needs
from launch_helpers import env_for
from tinytitan.speclang import load_protocol
from vision_e2e_harness import MODEL, Proxy, Vision

OPENCODE = shutil.which("opencode")
IMAGE_TOKENS = 256  # the demo vision model's tokens per picture (tinytitan/demo_model/vision.py)
LONG = 240  # seconds for one `claude -p` turn: a random-weight model answers at length (run_claude's default is 120)

pytestmark = [pytest.mark.clients]


def write_png(path: Path) -> Path:
    return image_helpers.write_png(path, (48, 32), (30, 144, 255))


@pytest.fixture(scope="module")
def vision(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("vision")
    server = Vision(scratch)
    yield server
    server.proc.stop()
    (scratch / "server.log").write_text("".join(server.proc.lines))  # for a look after a failure


@pytest.fixture
def proxy(vision, tmp_path):
    p = Proxy(vision.base, tmp_path)
    yield p
    p.proc.stop()


def contents(body: dict) -> list[dict]:
    """The turns of a request whose content is a list of parts: Messages' and Chat's messages, Responses'
    message items."""
    turns = body["messages"] if "messages" in body else [i for i in body["input"] if i.get("type") == "message"]
    return [t for t in turns if isinstance(t["content"], list)]


def parts(body: dict, kind: str) -> list[dict]:
    """The content parts of type ``kind`` (Messages ``image``, Responses ``input_image``, Chat ``image_url``)."""
    return [p for t in contents(body) for p in t["content"] if p.get("type") == kind]


def without(kind: str):
    """What ``prompt_without_images`` strips: the parts of type ``kind``, from every turn."""
    def strip(body: dict) -> dict:
        for t in contents(body):
            t["content"] = [p for p in t["content"] if p.get("type") != kind]
        return body
    return strip


def _count_route(spec: str, path: str) -> tuple[str, set | None]:
    """A count route of protocol ``spec`` (spec/*.yaml, loaded as the server loads it) and the fields it takes
    (None: those of the request it counts)."""
    (route,) = [r for r in load_protocol(spec).routes if r["path"] == path]
    return path, set(route["only"]) if "only" in route else None


# the routes that count a request's prompt without reading it (Chat has none)
COUNTS = {"/v1/messages": _count_route("anthropic_messages", "/v1/messages/count_tokens"),
          "/v1/responses": _count_route("openai_responses", "/v1/responses/input_tokens")}


def prompt_without_images(vision: Vision, path: str, body: dict, strip, headers=None) -> int:
    """The prompt tokens of ``body`` with its pictures taken out (``strip`` edits a copy): counted by the route's
    count (the prompt generate builds, which the request log's ``prompt=`` is, without reading those tokens: a
    resend of Claude Code's ~18k-token prompt reads all of it again, about 10 s, as the sliding-window layers
    cannot be cut back to where the picture was); on Chat, which has none, as logged for a one-token resend."""
    body = strip(copy.deepcopy(body))
    assert "data:image" not in json.dumps(body) and "iVBORw0KGgo" not in json.dumps(body)  # no PNG left
    if path in COUNTS:
        route, only = COUNTS[path]
        sent = {k: v for k, v in body.items() if k != "stream" and (only is None or k in only)}
        reply = httpx.post(vision.base + route, json=sent, headers=headers or {}, timeout=120)
        assert reply.status_code == 200, reply.text[:2000]
        return reply.json()["input_tokens"]
    body.update(stream=False, max_tokens=1)
    mark = vision.mark()
    reply = httpx.post(vision.base + path, json=body, headers=headers or {}, timeout=120)
    assert reply.status_code == 200, reply.text[:2000]
    (line,) = vision.wait_requests(mark, 1)
    return line["prompt"]


# ---------------------------------------------------------------- Claude Code
@claude.needs_claude
def test_claude_code_sends_a_mentioned_png_and_the_next_turn_reuses_it(vision, proxy, tmp_path):
    png = write_png(tmp_path / "work" / "shot.png")
    mark = vision.mark()
    events = claude.run_claude(proxy.base, MODEL, "describe @shot.png", tmp_path, timeout=LONG)
    first = events[-1]
    assert first["subtype"] == "success" and not first["is_error"], first
    sent = proxy.recorded("/v1/messages")
    assert len(sent) == 1, [r["body"]["messages"][-1] for r in sent]
    (image,) = parts(sent[0]["body"], "image")
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"
    assert image["source"]["data"] == __import__("base64").b64encode(png.read_bytes()).decode()
    (line,) = vision.wait_requests(mark, 1)
    assert line["status"] == 200 and not vision.refusals_since(mark), vision.refusals_since(mark) or line["line"]

    # the picture is in the prompt the server counted
    headers = {"anthropic-version": "2023-06-01"}
    text_only = prompt_without_images(vision, "/v1/messages", sent[0]["body"], without("image"), headers)
    assert IMAGE_TOKENS <= line["prompt"] - text_only <= IMAGE_TOKENS + 8, (line["prompt"], text_only)

    # the next turn resends the picture, and the server reads it from the cache, not again
    mark = vision.mark()
    again = claude.run_claude(proxy.base, MODEL, "and the colours?", tmp_path, "--continue", timeout=LONG)
    second = again[-1]
    assert second["subtype"] == "success" and not second["is_error"], second
    later = proxy.recorded("/v1/messages")[1]
    assert parts(later["body"], "image") == [image]
    turn = vision.wait_requests(mark, 1)[0]
    # (Claude Code may send a request of its own after the turn, the conversation in it; the random model's long
    # first answer can push that one past the demo model's window, once seen under load: it refuses no image)
    refused = [line for line in vision.refusals_since(mark) if "error=context_length_exceeded" not in line]
    assert turn["status"] == 200 and not refused, refused or turn["line"]
    # The whole first prompt, the picture in it, comes from the cache: not read again. Either the answer came back
    # as the tokens generated (a hit on the answer's entry), or as the same text in other token ids (a
    # random-weight model samples non-canonical tokenizations): Gemma 3's sliding-window layers (1024 tokens)
    # cannot be trimmed back, and the checkpoint kept at the end of the first prompt (all of it but its last
    # token) serves instead; the comparison parted only in the answer, after the whole first prompt.
    assert turn["cached"] >= line["prompt"] - 1, (turn["line"], line["line"])
    if turn["cache"] != "hit":
        rewritten = re.fullmatch(r"answer_rewritten@(\d+):the_previous_answer", turn["cache"])
        assert rewritten and int(rewritten.group(1)) >= line["prompt"], "".join(vision.proc.lines[-12:])

    streams = proxy.validate_replies("/v1/messages")
    assert streams[sent[0]["seq"]] and streams[later["seq"]], streams  # both turns' streams, whole


# ---------------------------------------------------------------- Codex
@needs(codex.CODEX is None, reason="Codex CLI not installed (npm install -g @openai/codex@0.171.0)")
def test_codex_sends_an_attached_png_as_input_image(vision, proxy, tmp_path):
    (entry,) = [m for m in json.loads(vision.catalog.read_text())["models"] if m["slug"] == MODEL]
    assert entry["input_modalities"] == ["text", "image"]
    write_png(tmp_path / "work" / "shot.png")
    mark = vision.mark()
    result = codex.run_codex(proxy.base, MODEL, tmp_path, "describe the picture", "--image=shot.png",
                             "-c", f"model_catalog_json={json.dumps(str(vision.catalog))}", timeout=240)
    assert result.returncode == 0, codex.explain_run(result)
    assert result.stdout.strip(), codex.explain_run(result)  # the model's (gibberish) answer
    (sent,) = proxy.recorded("/v1/responses")
    (image,) = parts(sent["body"], "input_image")
    assert image["image_url"].startswith("data:image/png;base64,")
    (line,) = vision.wait_requests(mark, 1)
    assert line["status"] == 200, line["line"]
    text_only = prompt_without_images(vision, "/v1/responses", sent["body"], without("input_image"))
    assert IMAGE_TOKENS <= line["prompt"] - text_only <= IMAGE_TOKENS + 8, (line["prompt"], text_only)
    assert proxy.validate_replies("/v1/responses") == {sent["seq"]: True}


def call_output_images(body: dict) -> list[dict]:
    """The ``input_image`` parts of a Responses request's ``function_call_output`` items."""
    return [p for i in body["input"] if i.get("type") == "function_call_output" and isinstance(i["output"], list)
            for p in i["output"] if p.get("type") == "input_image"]


def without_call_output_images(body: dict) -> dict:
    for item in body["input"]:
        if item.get("type") == "function_call_output" and isinstance(item["output"], list):
            item["output"] = [p for p in item["output"] if p.get("type") != "input_image"]
    return body


@needs(codex.CODEX is None, reason="Codex CLI not installed (npm install -g @openai/codex@0.171.0)")
def test_codex_view_image_sends_the_picture_in_the_call_output(vision, tmp_path):
    """The model calls ``view_image``: asked to by the proxy (``--tool-call``: the first request goes on with a
    forced tool choice and the path narrowed to ``shot.png``), the server's forced-call grammar makes the random
    model write the call in Gemma 3's own markup. Codex runs it and sends the picture back in the call's output;
    the next turn reads it into the prompt (its tokens counted) and runs free."""
    png = write_png(tmp_path / "work" / "shot.png")
    proxy = Proxy(vision.base, tmp_path, "--tool-call", 'view_image={"path": "shot.png"}')
    try:
        mark = vision.mark()
        result = codex.run_codex(proxy.base, MODEL, tmp_path, "look at shot.png",
                                 "-c", f"model_catalog_json={json.dumps(str(vision.catalog))}", timeout=240)
        assert result.returncode == 0, codex.explain_run(result)
        first, second = proxy.recorded("/v1/responses")
    finally:
        proxy.proc.stop()
    assert first["body"]["tool_choice"] == "auto" and not call_output_images(first["body"])  # as Codex sent it
    (call,) = [i for i in second["body"]["input"] if i.get("type") == "function_call"]
    assert call["name"] == "view_image" and json.loads(call["arguments"]) == {"path": "shot.png"}, call
    (output,) = [i for i in second["body"]["input"] if i.get("type") == "function_call_output"]
    assert output["call_id"] == call["call_id"]
    (image,) = call_output_images(second["body"])
    assert image["image_url"] == "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    lines = vision.wait_requests(mark, 2)
    assert [ln["status"] for ln in lines] == [200, 200] and not vision.refusals_since(mark), lines
    text_only = prompt_without_images(vision, "/v1/responses", second["body"], without_call_output_images)
    assert IMAGE_TOKENS <= lines[1]["prompt"] - text_only <= IMAGE_TOKENS + 8, (lines[1]["line"], text_only)
    streams = proxy.validate_replies("/v1/responses")
    assert streams == {first["seq"]: True, second["seq"]: True}, streams
    completed = [json.loads(d) for r in claude.read_record(proxy.replies) if r["seq"] == second["seq"]
                 for d in re.findall(r"^data: (.*)$", r["body"], re.M) if '"response.completed"' in d]
    (done,) = completed
    usage = done["response"]["usage"]  # the usage Codex read counts the picture as the log line does
    assert usage["input_tokens"] == lines[1]["prompt"], (usage, lines[1]["line"])


# ---------------------------------------------------------------- opencode
@needs(OPENCODE is None, reason="opencode is not installed: npm install -g opencode-ai@1.18.33")
def test_opencode_through_launch_sends_an_attached_png_as_image_url(vision, tmp_path):
    # (answers capped: the turn's own would run to thousands of tokens of gibberish; the picture is in the prompt)
    proxy = Proxy(vision.base, tmp_path, "--max-tokens", "64")
    try:
        opencode_sends_the_picture(vision, proxy, tmp_path)
    finally:
        proxy.proc.stop()


def opencode_sends_the_picture(vision, proxy, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    png = write_png(work / "shot.png")
    port = proxy.base.rsplit(":", 1)[1]
    mark = vision.mark()
    done = subprocess.run([sys.executable, "-m", "tinytitan", "launch", "opencode", "--port", port, "--",
                           "run", "describe the picture", f"--file={png}"], cwd=work, env=env_for(home),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    sent = proxy.recorded("/v1/chat/completions")
    assert sent, "opencode sent no request"
    with_image = [r for r in sent if parts(r["body"], "image_url")]
    assert with_image, [r["body"]["messages"][-1] for r in sent]
    assert all("Cannot read" not in json.dumps(r["body"]) for r in sent)  # no "model does not support image"
    for r in with_image:
        (part,) = parts(r["body"], "image_url")
        assert part["image_url"]["url"].startswith("data:image/png;base64,")
    lines = vision.wait_requests(mark, len(sent))
    assert [ln["status"] for ln in lines] == [200] * len(sent), [ln["line"] for ln in lines]
    # the turn's own request (with tools; the other is the title request, which runs alongside it)
    (main,) = [r for r in sent if r["body"].get("tools")]
    assert parts(main["body"], "image_url")
    text_only = prompt_without_images(vision, "/v1/chat/completions", main["body"], without("image_url"))
    assert any(IMAGE_TOKENS <= ln["prompt"] - text_only <= IMAGE_TOKENS + 8 for ln in lines), (lines, text_only)
    streams = proxy.validate_replies("/v1/chat/completions")
    assert set(streams) == {r["seq"] for r in sent} and streams[main["seq"]], streams  # the title's may be cut
