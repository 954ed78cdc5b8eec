"""The text closing the system prompt (ChatRequest.system_note: a Responses compaction summary, the memory
fragment, the verbosity sentence) is the request's own text like a system message's: the image placeholder's
text inside it is text, not an image (it was, when such text was a system message, before system_note)."""

from __future__ import annotations

from vision_helpers import RED, ask, part, vision  # noqa: F401  (the module's demo-vision backend fixture)


def test_placeholder_text_in_the_system_note_is_not_an_image(vision):  # noqa: F811
    note = "Earlier summary: the user asked why the template writes <start_of_image> before each picture."
    req = ask(part(RED), "and now?").with_(system_note=note)
    prepared = vision.prepare(req)  # was: 400 "the model's chat template placed 2 image(s) of the 1 sent"
    assert prepared.tokens.count(vision.image_token_id) == 256 and len(prepared.image_runs) == 1
    assert "writes <start_of_image> before" in prepared.prompt_text


def test_placeholder_text_in_an_output_formats_description_is_not_an_image(vision):  # noqa: F811
    """The output format's description closes the system prompt too (ChatRequest.closing_note): its placeholder
    text is text."""
    from tinytitan.chat_request import Grammar

    described = Grammar("json_schema", {"type": "object"}, "caption",
                        description="A caption for the picture after <start_of_image>.")
    prepared = vision.prepare(ask(part(RED), "caption it").with_(grammar=described))
    assert prepared.tokens.count(vision.image_token_id) == 256 and len(prepared.image_runs) == 1
    assert "picture after <start_of_image>." in prepared.prompt_text
