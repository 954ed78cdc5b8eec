"""Images with the real agents on a TEXT model: the session goes on.

- Claude Code (2.1.332): a Read of a PNG sends the picture back as an ``image`` block in a ``tool_result``. A text
  model refuses it with Anthropic's own wording and spelling of its place (``Could not process image:
  messages.3.content.0.tool_result.content.0.image: …``): Claude Code replaces that image in its history, says
  so, and the turn (and the next one, ``--continue``) completes. A Read of a PDF sends a base64 ``document``,
  refused alike (``Could not process PDF: messages.3.content.0.tool_result.content.1.document…``).
- Codex (0.171): the catalog the server writes says ``input_modalities: ["text"]`` for a text model, so Codex
  answers a ``view_image`` call itself (no image is sent) and the turn completes. That catalog cannot say
  ``image`` for a text model (it is written from the model's ``takes_images``); a catalog that claims it anyway
  (or Codex's fallback metadata, without a catalog) makes Codex send the picture, which the server refuses in
  OpenAI's words, naming the part.

Driven as tests/test_e2e_claude.py and tests/test_e2e_codex.py drive the clients (tests/claude_harness.py and
tests/codex_harness.py, reused).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import claude_harness as claude
import codex_harness as codex
from conftest import needs
from image_helpers import write_png

pytestmark = [pytest.mark.clients]


def image_blocks(body: dict) -> list[dict]:
    """Every image block of a Messages request (in user turns and inside tool results)."""
    found = []
    for m in body["messages"]:
        for b in m["content"] if isinstance(m["content"], list) else []:
            if b.get("type") == "image":
                found.append(b)
            if b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                found += [c for c in b["content"] if c.get("type") == "image"]
    return found


@claude.needs_claude
def test_claude_code_reads_a_png_on_a_text_model_and_goes_on(tmp_path):
    png = write_png(tmp_path / "work" / "shot.png")
    answer = "The picture could not be read here; the session goes on."
    later = "Second turn answered."
    script = [claude.tool_call("Read", {"file_path": str(png)}), answer, later]
    banner: list = []
    with claude.tinytitan(script, tmp_path, (), banner) as (base, model, record):
        server = banner.pop()
        debug = tmp_path / "claude-debug.log"
        events = claude.run_claude(base, model, "look at shot.png", tmp_path, "--allowedTools", "Read",
                                   "--debug-file", str(debug))
        again = claude.run_claude(base, model, "and now?", tmp_path, "--continue")
        log = "".join(server.lines)
    first, second = events[-1], again[-1]
    assert first["subtype"] == "success" and not first["is_error"] and first["result"] == answer, first
    assert second["subtype"] == "success" and not second["is_error"] and second["result"] == later, second
    # the Read really returned the picture, as an image block in the tool result
    results = claude.blocks(events, "user", "tool_result")
    assert results and any(isinstance(r["content"], list) and any(c.get("type") == "image" for c in r["content"])
                           for r in results), results
    requests = claude.model_requests(claude.read_record(record))
    with_image = [r for r in requests if image_blocks(r["body"])]
    assert with_image, "Claude Code never sent the image"
    # refused once, in Anthropic's words, naming the part; after that the image is gone from the history
    refused = re.findall(r"POST /v1/messages 400 anthropic_messages", log)
    assert len(refused) == len(with_image) == 1, (len(refused), len(with_image), log[-3000:])
    assert requests.index(with_image[0]) == 1  # the request after the Read
    assert all(not image_blocks(r["body"]) for r in requests[2:])
    assert len(requests) == 4  # Read call, refused, the answer, the next turn
    # it read the place the refusal names and replaced that one image, not every image of the latest turn (what it
    # does when it finds no place it can read: "Removed base64 image blocks from carrier …")
    said = debug.read_text()
    assert re.search(r"Removed unprocessable image at messages\.\d+\.content\.0\.tool_result\.content\.0; "
                     "retrying", said), said[-3000:]
    assert "Removed base64 image blocks" not in said


def write_pdf(path: Path, text: str = "Hello PDF") -> Path:
    """A one-page PDF with a line of text (built by hand: its five objects and their cross-reference table)."""
    content = f"BT /F1 12 Tf 20 100 Td ({text}) Tj ET".encode()
    objects = [b"<< /Type /Catalog /Pages 2 0 R >>", b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
               b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 200] /Contents 4 0 R "
               b"/Resources << /Font << /F1 5 0 R >> >> >>",
               b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
               b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    out, offsets = bytearray(b"%PDF-1.4\n"), []
    for i, obj in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (i, obj)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bytes(out))
    return path


@claude.needs_claude
def test_claude_code_reads_a_pdf_and_drops_only_that_document(tmp_path):
    """Claude Code's Read of a PDF sends it as a base64 ``document`` in the tool result, which this server refuses
    naming its place in the API's spelling: Claude Code replaces that one document and the turn completes (with
    no place it can read, it drops every base64 document of the latest message that holds one)."""
    pdf = write_pdf(tmp_path / "work" / "doc.pdf")
    answer = "The document could not be read here; the session goes on."
    banner: list = []
    with claude.tinytitan([claude.tool_call("Read", {"file_path": str(pdf)}), answer], tmp_path, (),
                          banner) as (base, model, record):
        server = banner.pop()
        debug = tmp_path / "claude-debug.log"
        events = claude.run_claude(base, model, "read doc.pdf", tmp_path, "--allowedTools", "Read",
                                   "--debug-file", str(debug))
        log = "".join(server.lines)
    assert events[-1]["subtype"] == "success" and events[-1]["result"] == answer, events[-1]
    assert len(re.findall(r"POST /v1/messages 400 anthropic_messages", log)) == 1, log[-3000:]
    said = debug.read_text()
    assert re.search(r"Removed unprocessable document at messages\.\d+\.content\.0\.tool_result\.content\.\d+; "
                     "retrying", said), said[-3000:]
    assert "Removed base64 document blocks" not in said


CATALOG = re.compile(r'model_catalog_json = "([^"]+)"')
VIEW = '<tool_call>\n{"name": "view_image", "arguments": {"path": "shot.png"}}\n</tool_call>'


def _codex_session(tmp_path: Path, script: list, catalog_of, monkeypatch):
    """Serve ``script``; run Codex once (``catalog_of(served catalog path) -> path`` picks the catalog it gets)
    → (result, requests, the served catalog entry, the server's log). The server writes its catalog into a cache
    of this test's own (the user's is shared with every other server started meanwhile)."""
    monkeypatch.setenv("TINYTITAN_CACHE", str(tmp_path / "cache"))
    scratch = tmp_path / "scratch"
    scratch.mkdir(parents=True, exist_ok=True)
    write_png(tmp_path / "work" / "shot.png")
    trace = tmp_path / "trace.jsonl"
    with codex.scripted_server(script, scratch) as (server, model), \
            codex.recording_proxy(server, trace, scratch) as proxy:
        (served,) = set(CATALOG.findall((scratch / "server.log").read_text()))
        entry = json.loads(Path(served).read_text())["models"][0]
        assert Path(served).is_relative_to(tmp_path)
        catalog = catalog_of(Path(served))
        extra = ["-c", f"model_catalog_json={json.dumps(str(catalog))}"] if catalog else []
        result = codex.run_codex(proxy, model, tmp_path, "look at shot.png", *extra)
        log = (scratch / "server.log").read_text()
    requests = [json.loads(line) for line in trace.read_text().splitlines()] if trace.exists() else []
    return result, requests, entry, log


def _images_sent(request: dict) -> list[dict]:
    return [part for item in request["body"]["input"] if item.get("type") == "function_call_output"
            and isinstance(item.get("output"), list) for part in item["output"] if part.get("type") == "input_image"]


@needs(codex.CODEX is None, reason="Codex CLI not installed (npm install -g @openai/codex)")
def test_codex_view_image_on_a_text_model_is_refused_by_codex_itself(tmp_path, monkeypatch):
    answer = "No picture for this model; the turn is done."
    result, requests, entry, log = _codex_session(tmp_path, [VIEW, answer], lambda served: served, monkeypatch)
    assert entry["input_modalities"] == ["text"]  # written from the text model's takes_images
    assert result.returncode == 0, codex.explain_run(result)
    assert result.stdout.strip() == answer, codex.explain_run(result)
    assert len(requests) == 2 and not any(_images_sent(r) for r in requests)
    (output,) = [i for i in requests[1]["body"]["input"] if i.get("type") == "function_call_output"]
    assert "image" in json.dumps(output["output"]).lower()  # Codex's own answer to the call
    assert " 400 " not in log


@needs(codex.CODEX is None, reason="Codex CLI not installed (npm install -g @openai/codex)")
@pytest.mark.parametrize("given", ["edited catalog", "no catalog"])
def test_codex_told_a_text_model_takes_images_gets_openais_refusal(tmp_path, monkeypatch, given):
    """The catalog the server writes cannot say ``image`` for a text model; one edited to claim it (or none: Codex's
    fallback metadata assumes images) makes Codex send the picture, and the server refuses it as OpenAI refuses an
    image for a model without vision."""
    def lying(served: Path) -> Path | None:
        if given == "no catalog":
            return None
        data = json.loads(served.read_text())
        data["models"][0]["input_modalities"] = ["text", "image"]
        path = tmp_path / "lying-catalog.json"
        path.write_text(json.dumps(data))
        return path

    result, requests, entry, log = _codex_session(tmp_path, [VIEW, "never reached"], lying, monkeypatch)
    assert entry["input_modalities"] == ["text"]
    sent = [r for r in requests if _images_sent(r)]
    assert sent, [r["body"]["input"][-1] for r in requests]
    (part,) = _images_sent(sent[0])
    assert part["image_url"].startswith("data:image/png;base64,")
    assert re.search(r"POST /v1/responses 400 openai_responses", log), log[-3000:]
    assert result.returncode != 0
    assert "input_image is only supported by certain models" in result.stderr + result.stdout, codex.explain_run(result)
