"""The image placeholder's text inside a message's own text is text, not an image.

A random-weight model writes Gemma 3's ``<start_of_image>`` into its answer now and then (so can a real one, or
a user pasting a chat template); the agent sends that answer back next turn beside the picture it attached.
Only the placeholders the chat template writes for image parts are images: the request is read, the text keeps
its placeholder text, and the image gets its 256 tokens once (found with Claude Code ``--continue`` on
``demo-vision``, which was refused: "the model's chat template placed 2 image(s) of the 1 sent").
"""

from __future__ import annotations

from tinytitan.chat_request import Message

from vision_helpers import RED, ask, part, vision  # noqa: F401  (the module's demo-vision backend fixture)


def test_placeholder_text_in_an_earlier_answer_is_not_an_image(vision):  # noqa: F811
    said = "a word<start_of_image>another"
    history = (Message("user", "hello"), Message("assistant", said, parts=(said,)))
    req = ask(part(RED), "and now?", history=history)
    prepared = vision.prepare(req)
    assert prepared.tokens.count(vision.image_token_id) == 256
    assert "a word<start_of_image>another" in prepared.prompt_text
    assert len(prepared.image_runs) == 1
    assert vision.count_tokens(req) == len(prepared.tokens)
    # the same in the user's own text, beside the picture
    req = ask(part(RED), "the template writes <start_of_image> here")
    assert vision.prepare(req).tokens.count(vision.image_token_id) == 256


def test_placeholder_text_in_a_calls_arguments_or_a_tools_schema_is_not_an_image(vision):  # noqa: F811
    """An agent wrote a Gemma template with its Write tool (the call's arguments hold the placeholder's text), and
    a tool describes the placeholder: the screenshot attached next turn is still the one image."""
    from tinytitan.chat_request import Tool, ToolCall

    call = ToolCall("c1", "Write", '{"content": "{{ \'<start_of_image>\' }}"}')
    history = (Message("user", "write the snippet"), Message("assistant", "", tool_calls=(call,)),
               Message("tool", "written", tool_call_id="c1", name="Write"))
    tool = Tool("Write", "writes a file; <start_of_image> marks an image", {
        "type": "object", "properties": {"content": {"type": "string", "description": "e.g. <start_of_image>"}}})
    req = ask(part(RED), "and this?", history=history).with_(tools=(tool,))
    prepared = vision.prepare(req)
    assert prepared.tokens.count(vision.image_token_id) == 256 and len(prepared.image_runs) == 1
    assert "<start_of_image>' }}" in prepared.prompt_text
