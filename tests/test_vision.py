"""Vision models on the engine path (the demo vision model, a tiny Gemma 3, and a tiny Mistral 3 built from its
config here): images rendered through the model's template and processor, counted exactly, read where a row's
cache starts, keyed by digest in the prompt cache (a repeated image is not encoded again; a changed one is named),
decoded in the batch like any row, and a bad image a 400 naming its part."""

from __future__ import annotations

import io

import pytest
import trio

from tinytitan.chat_request import ChatRequest, Grammar, Message
from tinytitan.engine.engine import Engine
from tinytitan.errors import ApiError
from tinytitan.events import Finished, TextDelta
from vision_helpers import BLUE, RED, engine_logits, ask, decode, part, png
from vision_helpers import vision  # noqa: F401  (the fixture)


def text_of(events) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def test_demo_vision_matches_mlx_vlm_and_mlx_lm(vision):
    """The built weights are exactly the parameters mlx-vlm's gemma3 reads (mlx-lm reads its language part), the
    processor is Gemma 3's own (896 pixels, 256 tokens an image) and the template Gemma 3's."""
    from mlx.utils import tree_flatten
    from mlx_vlm.utils import load_model

    from tinytitan.demo_model.vision import param_shapes

    model = load_model(vision.path, lazy=True)
    params = {k: tuple(v.shape) for k, v in tree_flatten(model.parameters()) if k != "language_model.lm_head.weight"}
    assert params == param_shapes()
    assert type(vision.processor).__name__ == "Gemma3Processor"
    assert vision.processor.image_processor.size == {"height": 896, "width": 896}
    assert vision.family.name == "gemma" and vision.takes_images
    assert vision.describe()["input_modalities"] == ["text", "image"]


def test_image_tokens_counted_exactly(vision):
    req = ask(part(RED), "What is on the screen?")
    prepared = vision.prepare(req)
    assert len(prepared.tokens) == vision.count_tokens(req) > vision.count_tokens(ask("What is on the screen?")) + 256
    assert prepared.tokens.count(vision.image_token_id) == 256
    [run] = prepared.image_runs
    assert run.end - run.start == 256 and run.digest == part(RED).digest
    assert prepared.tokens[run.start:run.end] == [vision.image_token_id] * 256
    assert "<start_of_image>" in prepared.prompt_text and prepared.prompt_text.startswith("<bos><start_of_turn>user")


def test_prefill_matches_mlx_vlm(vision):
    """The first token the engine samples is raw mlx-vlm's on the same model, prompt and image (greedy)."""
    import mlx.core as mx
    from mlx_vlm.utils import load_model

    from tinytitan.engine.backends.mlx import MLXBackend

    req = ask(part(BLUE), "Describe it.", max_tokens=1)
    prepared, events = decode(vision, req)
    model = load_model(vision.path)
    template_text = MLXBackend.render(vision, req)  # the template's text, before the processor expands it
    inputs = vision.processor(text=[template_text], images=[_image(BLUE)], add_special_tokens=False,
                              return_tensors="np")
    ids = mx.array(inputs["input_ids"])
    assert ids[0].tolist() == prepared.tokens
    emb = model.get_input_embeddings(ids, mx.array(inputs["pixel_values"]), mask=mx.ones(ids.shape)).inputs_embeds
    logits = model.language_model(ids, inputs_embeds=emb, cache=model.language_model.make_cache()).logits
    first = int(mx.argmax(logits[0, -1]).item())
    assert text_of(events).strip() == vision.tokenizer.decode([first]).strip()  # (an answer opens unspaced)


async def alone_and_together(backend, reqs: list[ChatRequest], max_batch: int) -> tuple[list, list]:
    """Each request decoded alone (an empty prompt cache each time), then all sent together to one engine: the
    events of each."""

    async def run(engine, r):
        async with engine.session(r) as session:
            return [ev async for ev in session]

    alone = []
    for r in reqs:
        backend.prompt_cache.clear()
        alone.append(await run(Engine(backend, max_batch=1), r))
    backend.prompt_cache.clear()
    engine = Engine(backend, max_batch=max_batch)
    together: list = [None] * len(reqs)

    async def one(i, r):
        together[i] = await run(engine, r)

    async with trio.open_nursery() as nursery:
        for i, r in enumerate(reqs):
            nursery.start_soon(one, i, r)
    return alone, together


def _image(data: bytes):
    from PIL import Image

    return Image.open(io.BytesIO(data)).convert("RGB")


def test_repeated_image_is_not_encoded_again(vision):
    """A later turn resending the image reuses the cached prefix: the image is not encoded again, and the usage
    says how much was cached. Another image at that place is encoded, and the miss names it."""
    vision.prompt_cache.clear()
    first = ask(part(RED), "What colour is this?")
    before = vision.encoded_images
    p1, events = decode(vision, first)
    assert vision.encoded_images == before + 1
    answer = text_of(events)
    second = ask("And now?", history=(first.messages[0], Message("assistant", answer)))
    p2, events2 = decode(vision, second)
    assert vision.encoded_images == before + 1, "the image was encoded again"
    assert p2.cache_miss["reason"] == "hit"
    finished = events2[-1]
    assert isinstance(finished, Finished) and finished.usage.cached_tokens >= p1.image_runs[0].end
    assert events[-1].timing.prefill_s > 10 * finished.timing.prefill_s  # the first turn's includes the encoding
    changed = ask(part(BLUE), "What colour is this?")
    p3, _ = decode(vision, changed)
    assert vision.encoded_images == before + 2
    assert p3.cache_miss["reason"] == "messages_changed"
    assert p3.cache_miss["where"] == "message 0 (user) image 0"
    assert "messages[0].content[0]" in p3.cache_miss["detail"]


def test_an_answer_sent_back_otherwise_past_the_sliding_window_keeps_the_image(vision):
    """Gemma 3's sliding-window layers cannot be trimmed back once a prompt is longer than the window (1024): the
    answer's entry serves only a next turn that sends the answer back as the same tokens. The checkpoint at the
    end of the prompt (engine/cache/checkpoint.py) serves one that does not: the whole first prompt, its image
    included, is reused, and the next turn reads only the answer and its own turn, to the same tokens."""
    vision.prompt_cache.clear()
    first = ask(part(RED), " ".join(f"word{i}" for i in range(320)) + " What colour is this?")
    before = vision.encoded_images
    p1, _ = decode(vision, first)
    assert len(p1.tokens) > 1024 + 16 and vision.encoded_images == before + 1
    second = ask("And now?", history=(first.messages[0], Message("assistant", "Not what the model wrote.")))
    p2, events = decode(vision, second)
    assert vision.encoded_images == before + 1, "the image was encoded again"
    assert p2.cache_miss["reason"] == "answer_rewritten"  # it parted from the answer's entry, inside the answer
    assert p2.tokens[:len(p1.tokens)] == p1.tokens
    assert events[-1].usage.cached_tokens == len(p1.tokens) - 1  # all but the token the first sample came after
    vision.prompt_cache.clear()
    _, cold = decode(vision, second)
    assert vision.encoded_images == before + 2 and text_of(cold) == text_of(events)


def test_a_changed_later_image_keeps_the_earlier_one(vision):
    """Two images, the second changed: the prefix through the first is reused, only the second is encoded."""
    vision.prompt_cache.clear()
    two = ask(part(RED), "Left.", part(BLUE, "messages[0].content[2]"), "Right.")
    decode(vision, two)
    before = vision.encoded_images
    other = ask(part(RED), "Left.", part(png((0, 255, 0)), "messages[0].content[2]"), "Right.")
    prepared, events = decode(vision, other)
    assert vision.encoded_images == before + 1
    assert prepared.cache_miss["where"] == "message 0 (user) image 1"
    assert events[-1].usage.cached_tokens == prepared.image_runs[1].start


def test_tool_result_image_is_read(vision):
    """A screenshot returned by a tool (Claude Code's Read of a PNG) reaches the template: Gemma's tool output turn
    keeps the image in place."""
    from tinytitan.chat_request import ToolCall

    history = (Message("user", "Read shot.png"),
               Message("assistant", "", tool_calls=(ToolCall("c1", "Read", '{"file_path": "shot.png"}'),)),
               Message("tool", "", parts=(part(RED, "messages[2].content[0].content[0]"),), tool_call_id="c1",
                       name="Read"))
    req = ChatRequest(model="demo-vision", messages=history, temperature=0, max_tokens=3)
    prepared = vision.prepare(req)
    assert len(prepared.image_runs) == 1
    assert "```tool_output" in prepared.prompt_text


def test_bad_image_is_a_400_naming_the_part(vision):
    with pytest.raises(ApiError) as exc:
        vision.prepare(ask("Look:", part(b"\x89PNG\r\n\x1a\nnot really", "messages[0].content[1]")))
    assert exc.value.kind == "invalid_request" and exc.value.param == "messages[0].content[1]"
    assert exc.value.code == "invalid_image" and "damaged" in exc.value.message  # each protocol words it (Messages:
    # "Could not process image: …", the wording Claude Code recovers from)


def test_text_requests_are_unchanged(vision):
    """A text-only request to a vision model is prepared and cached as on any text model."""
    prepared, events = decode(vision, ask("Hello there."))
    assert prepared.image_runs == () and isinstance(events[-1], Finished)


async def test_rows_with_images_batch_like_any_other(vision):
    """Requests with images (and one without, and one under a grammar) decoded together in the continuous batch
    each give what they give alone."""
    reqs = [ask(part(RED), "One."), ask(part(BLUE), "Two.", max_tokens=9), ask("Three."),
            ask(part(RED), "Four.", grammar=Grammar("json_schema", {"type": "object", "properties": {
                "a": {"type": "boolean"}}, "required": ["a"], "additionalProperties": False}), max_tokens=24)]

    alone, together = await alone_and_together(vision, reqs, 4)
    alone = [text_of(events) for events in alone]
    assert [text_of(t) for t in together] == alone
    assert all(isinstance(t[-1], Finished) for t in together)
    assert alone[3].replace(" ", "").startswith('{"a":')  # the grammar mask held on a row with an image


# -- a second family: Mistral 3 (Pixtral vision tower), whose image token count follows the image's size ------------

@pytest.fixture(scope="module")
def mistral(tmp_path_factory):
    from vision_models import build_mistral3

    from tinytitan.engine.backends.vision import VisionBackend, backend_class

    path = build_mistral3(tmp_path_factory.mktemp("mistral3"))
    assert backend_class(path) is VisionBackend
    return VisionBackend(path, "mistral3-tiny")


def test_mistral3_image_tokens_follow_the_image_size(mistral):
    """Pixtral writes rows of [IMG] closed by [IMG_BREAK] and the last by [IMG_END], as many as the resized image
    needs (14-pixel patches merged 2×2): counted exactly, and the run covers them all."""
    assert type(mistral.processor).__name__ == "Mistral3Processor" and mistral.family.name == "mistral"
    small = mistral.prepare(ask(part(png((9, 9, 9), (64, 48))), "What?", model="mistral3-tiny"))
    wide = mistral.prepare(ask(part(png((9, 9, 9), (200, 60))), "What?", model="mistral3-tiny"))
    assert small.tokens.count(mistral.image_token_id) == 3 * 2  # ceil(64/28) × ceil(48/28)
    assert wide.tokens.count(mistral.image_token_id) == 8 * 3
    assert "[IMG][IMG][IMG][IMG_BREAK][IMG][IMG][IMG][IMG_END]What?[/INST]" in small.prompt_text
    [run] = small.image_runs
    assert run.end - run.start == 3 * 2 + 1  # its [IMG_BREAK] inside
    assert mistral.count_tokens(ask(part(png((9, 9, 9), (200, 60))), "What?", model="mistral3-tiny")) == \
        len(wide.tokens)


def test_mistral3_prefill_matches_mlx_vlm_and_is_cached(mistral):
    import mlx.core as mx
    from mlx_vlm.utils import load_model

    from tinytitan.engine.backends.mlx import MLXBackend

    image = png((200, 30, 90), (90, 70))
    req = ask(part(image), "Describe it.", model="mistral3-tiny", max_tokens=4)
    before = mistral.encoded_images
    prepared, events = decode(mistral, req)
    model = load_model(mistral.path)
    inputs = mistral.processor(text=[MLXBackend.render(mistral, req)], images=[_image(image)],
                               add_special_tokens=False, return_tensors="np")
    ids = mx.array(inputs["input_ids"])
    assert ids[0].tolist() == prepared.tokens
    emb = model.get_input_embeddings(ids, mx.array(inputs["pixel_values"]),
                                     image_sizes=mx.array(inputs["image_sizes"])).inputs_embeds
    logits = model.language_model(ids, inputs_embeds=emb, cache=model.language_model.make_cache()).logits
    first = int(mx.argmax(logits[0, -1]).item())
    assert mistral.tokenizer.decode([first]).strip() and text_of(events).startswith(
        mistral.tokenizer.decode([first]).strip())
    again = ask("More.", model="mistral3-tiny",
                history=(req.messages[0], Message("assistant", text_of(events))))
    prepared2, _ = decode(mistral, again)
    assert mistral.encoded_images == before + 1  # the image came from the cache
    assert prepared2.cache_miss["offset"] > prepared.image_runs[0].end  # (the random answer may come back trimmed)


def test_serve_demo_vision_and_text_models_unchanged(monkeypatch):
    """``serve --model demo-vision`` gets the vision backend; the text demo model stays a plain MLX backend."""
    from tinytitan.flags import build_parser
    from tinytitan.model_setup import make_backends
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.backends.vision import VisionBackend

    [vision] = make_backends(build_parser().parse_args(["serve", "--model", "demo-vision", "--prompt-cache-dir",
                                                        "off"]))
    assert isinstance(vision, VisionBackend) and vision.model_id == "demo-vision"
    assert vision.card()["capabilities"][-1] == "vision"
    [text] = make_backends(build_parser().parse_args(["serve", "--prompt-cache-dir", "off"]))
    assert type(text) is MLXBackend and not text.takes_images


def test_gguf_vision_projector_is_named(tmp_path, caplog):
    """A GGUF beside its vision projector (LM Studio's layout) is served as text, and the log says why."""
    from tinytitan.models.resolve import note_projector

    (tmp_path / "gemma-3-4b-it-Q4_K_M.gguf").write_bytes(b"")
    (tmp_path / "mmproj-model-f16.gguf").write_bytes(b"")
    with caplog.at_level("WARNING", logger="tinytitan.models"):
        note_projector(tmp_path / "gemma-3-4b-it-Q4_K_M.gguf")
    assert "mmproj-model-f16.gguf" in caplog.text and "images to it are refused" in caplog.text


# -- Qwen2.5-VL and Qwen3-VL (dense, MoE), whose image tokens take M-RoPE positions (fewer than there are of them) --------------

@pytest.fixture(scope="module", params=["qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
def qwen(request, tmp_path_factory):
    import vision_models

    from tinytitan.engine.backends.vision import VisionBackend, backend_class

    path = getattr(vision_models, f"build_{request.param}")(tmp_path_factory.mktemp(request.param))
    assert backend_class(path) is VisionBackend
    return VisionBackend(path, "qwen-vl-tiny")


def _raw_logits(backend, prepared, images, follow):
    """Raw mlx-vlm on the whole prompt (its own M-RoPE positions and rope deltas), then ``follow`` fed one by one:
    the last logits after each."""
    import mlx.core as mx
    import numpy as np
    from mlx_lm.models.cache import make_prompt_cache
    from mlx_vlm.utils import load_model

    model = load_model(backend.path)
    ids = mx.array(prepared.tokens)[None]
    inputs = {k: mx.array(np.concatenate([backend.processed(p).inputs[k] for p in images]))
              for k in ("pixel_values", "image_grid_thw")}
    emb = model.get_input_embeddings(ids, inputs["pixel_values"], image_grid_thw=inputs["image_grid_thw"])
    cache = make_prompt_cache(model.language_model)
    deepstack = {k: getattr(emb, k) for k in ("visual_pos_masks", "deepstack_visual_embeds")
                 if getattr(emb, k) is not None}  # Qwen3-VL's
    out = [model.language_model(ids, inputs_embeds=emb.inputs_embeds, cache=cache, position_ids=emb.position_ids,
                                rope_deltas=emb.rope_deltas, **deepstack).logits[0, -1]]
    for token in follow:
        out.append(model.language_model(mx.array([[token]]), cache=cache).logits[0, -1])
    return out


def test_qwen_vl_decodes_at_the_true_positions(qwen):
    """Two images of different shapes, then four tokens decoded: the logits are raw mlx-vlm's (M-RoPE, its rope
    deltas; Qwen3-VL's deepstack) to float rounding, though the text is decoded by mlx-lm's model at its cache
    offset."""
    import mlx.core as mx
    import numpy as np

    first, second = part(png((255, 0, 0), (120, 64))), part(png((0, 90, 200), (60, 150)), "messages[0].content[2]")
    req = ask(first, "Left and right:", second, "What changed?", model="qwen-vl-tiny")
    prepared = qwen.prepare(req)
    grids = np.concatenate([qwen.processed(p).inputs["image_grid_thw"] for p in (first, second)])
    _, deltas = qwen.ensure_loaded() and qwen.vlm.language_model.get_rope_index(mx.array(prepared.tokens)[None],
                                                                                 mx.array(grids))
    assert sum(r.rope_delta for r in prepared.image_runs) == int(deltas.item()) < 0
    follow = [17, 301, 5, 77]
    mine, _ = engine_logits(qwen, prepared, follow)
    raw = _raw_logits(qwen, prepared, [first, second], follow)
    for a, b in zip(mine, raw):
        assert float(mx.abs(a - b).max()) < 1e-4


def test_qwen_vl_cached_prefix_is_moved_to_the_new_prompt(qwen):
    """The first image from the cache (kept at its true positions, moved to the new prompt's shift), only the
    changed second image encoded: still raw mlx-vlm's logits."""
    import mlx.core as mx

    qwen.prompt_cache.clear()
    first = part(png((255, 0, 0), (120, 64)))
    old = ask(first, "Left and right:", part(png((1, 2, 3), (200, 60)), "messages[0].content[2]"), "Same?",
              model="qwen-vl-tiny")
    decode(qwen, old)
    before = qwen.encoded_images
    second = part(png((0, 90, 200), (60, 150)), "messages[0].content[2]")
    new = ask(first, "Left and right:", second, "Same?", model="qwen-vl-tiny")
    prepared = qwen.prepare(new)
    assert prepared.cache_miss["where"] == "message 0 (user) image 1"
    mine, _ = engine_logits(qwen, prepared, [9, 10])
    assert qwen.encoded_images == before + 1
    raw = _raw_logits(qwen, prepared, [first, second], [9, 10])
    for a, b in zip(mine, raw):
        assert float(mx.abs(a - b).max()) < 1e-4


async def test_qwen_vl_rows_batch_with_text_rows(qwen):
    """Qwen-VL rows with images (their keys shifted) decode in the batch beside a text row: what each gives
    alone."""
    reqs = [ask(part(png((255, 0, 0), (120, 64))), "One.", model="qwen-vl-tiny"),
            ask(part(png((0, 90, 200), (60, 150))), "Two.", model="qwen-vl-tiny", max_tokens=9),
            ask("Three.", model="qwen-vl-tiny")]

    alone, together = await alone_and_together(qwen, reqs, 3)
    assert [text_of(t) for t in together] == [text_of(t) for t in alone]


async def test_served_usage_counts_image_tokens(serve, vision, monkeypatch):
    """Through a real server and the Anthropic SDK (every body checked against its types): the image's tokens are
    in ``count_tokens`` and in the usage, and the next turn resending it reads it from the cache. The image parts
    are put in by a test-only hook on the backend (a marker in the text): parsing images off the wire is the
    protocols' part."""
    from anthropic_util import sdk

    marker = "<<screenshot>>"

    def with_image(req: ChatRequest) -> ChatRequest:
        messages = []
        for i, m in enumerate(req.messages):
            if marker in m.content:
                before, after = m.content.split(marker, 1)
                m = Message(m.role, before + after, parts=(before, part(RED, f"messages[{i}].content[0]"), after))
            messages.append(m)
        return req.with_(messages=tuple(messages))

    real_prepare, real_count = vision.prepare, vision.count_tokens
    monkeypatch.setattr(vision, "prepare", lambda req: real_prepare(with_image(req)))
    monkeypatch.setattr(vision, "count_tokens", lambda req: real_count(with_image(req)))
    vision.prompt_cache.clear()
    s = await serve(backend=vision)
    c = sdk(s)
    first = [{"role": "user", "content": marker + "What is on the screen?"}]
    counted = await c.messages.count_tokens(model="demo-vision", messages=first)
    assert counted.input_tokens == vision.count_tokens(ChatRequest(model="demo-vision", messages=(
        Message("user", marker + "What is on the screen?"),))) > 256
    made = await c.messages.create(model="demo-vision", max_tokens=4, messages=first)
    assert made.usage.input_tokens + (made.usage.cache_read_input_tokens or 0) == counted.input_tokens
    text = "".join(b.text for b in made.content if b.type == "text")
    again = await c.messages.create(model="demo-vision", max_tokens=4, messages=[
        *first, {"role": "assistant", "content": text or "?"}, {"role": "user", "content": "And the title?"}])
    assert again.usage.cache_read_input_tokens > 256  # the image's tokens came from the cache


def test_image_prefix_survives_a_restart_on_disk(vision, tmp_path):
    """The prompt cache on disk keeps an image's prefix under its digest: after a restart (a new backend on the same
    directory) the next turn reads it back and does not encode the image again; another image is not taken for it."""
    _restart(vision, tmp_path)


def test_qwen_vl_prefix_survives_a_restart_on_disk(qwen, tmp_path):
    """The same for M-RoPE: the prefix on disk holds its true positions, moved to the next prompt's shift."""
    _restart(qwen, tmp_path)


def _restart(old, tmp_path):
    import mlx.core as mx

    from tinytitan.engine.cache.disk import PromptDisk
    from tinytitan.engine.cache.disk_files import layout_of
    from tinytitan.engine.backends.vision import VisionBackend

    def fresh():
        backend = VisionBackend(old.path, old.model_id)
        backend.prompt_cache.disk = PromptDisk(tmp_path, sorted(backend.path.glob("*.safetensors")),
                                               lambda: layout_of(backend.ensure_loaded()), 1 << 30)
        backend.prompt_cache.disk.start()
        return backend

    question = "What is it? " + "Say what you see in it, the colours and the shapes, and what they mean. " * 3
    first = ask(part(png((255, 0, 0), (120, 64))), question, model=old.model_id)
    before = fresh()
    decode(before, first)
    assert before.prompt_cache.disk.flush()
    after = fresh()
    follow = ask("Why?", model=old.model_id, history=(first.messages[0], Message("assistant", "A red box.")))
    prepared = after.prepare(follow)
    mine, _ = engine_logits(after, prepared, [3])
    assert after.encoded_images == 0, "the image was encoded again after the restart"
    old.prompt_cache.clear()
    fresh_logits, _ = engine_logits(old, old.prepare(follow), [3])  # read from scratch
    for a, b in zip(mine, fresh_logits):
        assert float(mx.abs(a - b).max()) < 1e-4
    other = after.prepare(ask(part(png((0, 0, 255), (120, 64))), question, model=old.model_id))
    engine_logits(after, other, [])
    assert after.encoded_images == 1


def test_fast_path_keeps_images():
    """The ``<id>-fast`` path strips the client's scaffolding, never the user's images."""
    from tinytitan.engine.prompt.messages import fast_path

    req = ask("<system-reminder>ctx</system-reminder>Look: ", part(RED, "messages[0].content[1]"), " why?")
    [_, user] = fast_path(req).messages
    assert user.parts[1] == part(RED, "messages[0].content[1]") and "ctx" not in "".join(user.parts[::2])


def test_quantized_vision_model(tmp_path):
    """A vision model quantized as mlx-community converts them (mlx-vlm's convert: 4-bit language model, vision
    tower kept): served, its embedding table one table for both libraries."""
    import mlx.core as mx
    from mlx_vlm.convert import convert

    from tinytitan.demo_model.vision import ensure_demo_vision
    from tinytitan.engine.backends.vision import VisionBackend

    convert(str(ensure_demo_vision()), str(tmp_path / "q4"), quantize=True, q_group_size=32, q_bits=4)
    backend = VisionBackend(tmp_path / "q4", "demo-vision-4bit")
    prepared, events = decode(backend, ask(part(RED), "What is it?", model="demo-vision-4bit"))
    assert isinstance(events[-1], Finished) and backend.encoded_images == 1
    ours, theirs = backend.model.language_model.model.embed_tokens, backend.vlm.language_model.model.embed_tokens
    assert type(ours).__name__ == "QuantizedEmbedding" and mx.array_equal(ours.weight, theirs.weight)


def test_vision_family_not_served_is_a_text_model(tmp_path, caplog):
    """A vision model of a family not served here (Gemma 4, GLM-4V …) is served as the text model it also is, and
    the log says its images are not read."""
    import json

    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.backends.vision import backend_class

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "glm4v", "vision_config": {"depth": 2}}))
    with caplog.at_level("WARNING", logger="tinytitan.vision"):
        assert backend_class(tmp_path) is MLXBackend
    assert "glm4v vision model: its images are not read here" in caplog.text


def test_a_tool_result_with_an_image_that_loads_a_deferred_tool_declares_it(vision):
    """A tool result holding an image is rendered from its parts: the definitions of the deferred tools it loads
    (``tool_reference``) are declared there too, as they are in a text-only result."""
    from tinytitan.chat_request import Tool, ToolCall

    grab = Tool("grab_window", "Grab a screenshot of one window by its title", {
        "type": "object", "properties": {"title": {"type": "string"}}}, deferred=True)
    search = Tool("ToolSearch", "search tools", {"type": "object", "properties": {"query": {"type": "string"}}})
    history = (Message("user", "find a screenshot tool"),
               Message("assistant", "", tool_calls=(ToolCall("t1", "ToolSearch", '{"query": "shot"}'),)),
               Message("tool", "found one", parts=("found one", part(RED)), tool_call_id="t1", name="ToolSearch",
                       tool_references=("grab_window",)))
    prepared = vision.prepare(ask("use it", history=history).with_(tools=(search, grab)))
    assert "Grab a screenshot of one window by its title" in prepared.prompt_text
    assert len(prepared.image_runs) == 1


def test_a_tool_result_with_an_image_keeps_its_fence_on_gemma_3(vision):
    """Gemma 3's template trims each text part: the fence and separators around a tool result that holds an image
    were parts of their own, so the tool's text became the fence's info string and the next user text was glued
    to the closing fence. Text beside text is one part: the result reads as its text-only form does."""
    from tinytitan.chat_request import ToolCall

    base = (Message("user", "take a screenshot"),
            Message("assistant", "", tool_calls=(ToolCall("c1", "screenshot", "{}"),)))
    shot = Message("tool", "Window: Editor", parts=("Window: Editor", part(RED)), tool_call_id="c1", name="screenshot")
    prompt = vision.prepare(ask("what do you see?", history=(*base, shot))).prompt_text
    assert "```tool_output\nWindow: Editor" in prompt
    assert "```what do you see?" not in prompt and "what do you see?" in prompt
