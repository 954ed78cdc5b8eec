"""A thinking block's signature is never empty: pi (pi-ai's anthropic-messages provider) sends a thinking block
whose signature is empty back as a plain text block, so its next turn read the model's reasoning as text it said
aloud (outside the template's reasoning markers) and the prompt cache lost every answer."""

from __future__ import annotations

from anthropic_util import MODEL, body, post, sdk, sse


async def test_a_non_stream_thinking_block_is_signed(serve):
    s = await serve(["<think>Let me see.</think>Hello there."])
    m = await sdk(s).messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    assert m.content[0].type == "thinking" and m.content[0].signature != ""


async def test_a_streamed_thinking_block_is_signed(serve):
    s = await serve(["<think>First, plan.</think>Done."])
    r = await post(s, body(stream=True), "/v1/messages")
    deltas = [d["delta"] for e, d in sse(r.text) if e == "content_block_delta"]
    signatures = [d["signature"] for d in deltas if d["type"] == "signature_delta"]
    assert signatures and all(signatures)


async def test_what_pi_sends_back_keeps_the_reasoning_out_of_the_said_text(serve):
    """pi's rule (pi-ai providers/anthropic.ts convertMessages): a thinking block with an empty signature goes
    back as a text block. Signed, it goes back as thinking, which the template renders as reasoning (Qwen3's
    drops an earlier turn's), not as words the model said."""
    s = await serve(["<think>Plan carefully.</think>One.", "Two."])
    first = await sdk(s).messages.create(model=MODEL, max_tokens=100, messages=[{"role": "user", "content": "hi"}])
    thinking, text = first.content
    sent_back = ({"type": "thinking", "thinking": thinking.thinking, "signature": thinking.signature}
                 if thinking.signature.strip() else {"type": "text", "text": thinking.thinking})
    proto = s.server.protocols["anthropic_messages"]
    req = proto.chat_request(proto.validator.validate(body(messages=[
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [sent_back, {"type": "text", "text": text.text}]},
        {"role": "user", "content": "again"}])))
    assert "Plan carefully." not in s.engine.backend.render(s.engine.apply_model(req))
