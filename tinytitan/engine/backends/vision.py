"""Vision models: mlx-vlm's vision tower and projector in front of mlx-lm's language model, in the one engine path.

Rules:
- Which models: an MLX directory (or Hugging Face snapshot) whose config.json has a ``vision_config`` and a
  ``model_type`` that both mlx-vlm (the vision tower, projector and processor) and mlx-lm (the language model)
  know (``FAMILIES``: Gemma 3, Mistral 3, Qwen2.5-VL, Qwen3-VL dense and MoE). Anything else is a text model,
  served as today (``backend_class``), and so is any model under mlx.launch (a rank holds part of the language
  model; the vision tower is not split).
- Loading: mlx-lm loads the language model: the decoder's, batched like any text model. mlx-vlm loads its own
  model from the same files lazily; its vision tower and projector are read, and its language model is given
  mlx-lm's arrays (one copy of the weights: it reads the images' tokens where positions need its own rope).
- Rendering: a message with images is rendered by the model's own chat template with ``{"type": "image"}``
  parts; each placeholder the template writes for an image is replaced by that image's tokens as the model's own
  processor writes them for it (Gemma 3: ``<start_of_image>``, 256 ``<image_soft_token>``, ``<end_of_image>``;
  Pixtral: rows of ``[IMG]`` closed by ``[IMG_BREAK]`` / ``[IMG_END]``, as many as the resized image needs), and
  the prompt is tokenized as any. ``count_tokens`` and usage count those tokens exactly. The placeholder's text
  inside a message's own text (a model's earlier answer that wrote it, a pasted template) stays text: only the
  placeholders the template writes for image parts are images.
- Reading: where a row's cache starts (``prompt_prefix``, on the model thread): the longest cached prefix (its
  images keyed by digest: cache/entries.py's keyed), backed off to the start of an image it cuts; then the images after
  it are encoded (vision tower + projector: ``encoded_images`` counts them) and the prompt is read from their
  embeddings through the end of the last image. The row then reads the text after it like any row: it joins the
  batch, its grammar mask and drafting apply to its text. To the decoder it is a prompt-cache hit.
- M-RoPE (Qwen2.5-VL, Qwen3-VL): an image's tokens take rope positions on a grid (time, height, width), fewer
  than there are of them, so the text after an image sits at a position behind its index (``ImageRun.rope_delta``).
  The images are read by mlx-vlm's language model at their true positions (Qwen3-VL's deepstack features with
  them), all shifted by one constant (rope is relative: the attention is unchanged) chosen so that the text after
  the last image sits at its index: from there the row decodes in mlx-lm's model at its cache offset, in the batch
  like any row. Kept entries hold true positions (the prompt cache turns a row's keys back, ``reframe``), and a
  prefix taken from the cache is shifted to the new prompt's constant: rotating cached keys by a constant is the
  same rotation rope applies.
- An image is opened and processed once per request, in ``prepare`` (``images.open_image``: a 400 naming the part
  when it cannot be); what the processor makes of it (pixel values, its token count) is kept per digest for the
  turns that resend it, within ``KEPT_IMAGE_BYTES``. A request's own images are held past that budget until they
  are read or counted (``let_go``): a request of more than the budget holds would otherwise evict its own and
  process each several times. So one request may hold its 100 images (about 1 GB of a Gemma 3's) for its reading;
  one dropped before it is read is trimmed by the next image processed. Two requests prepared at once may still
  evict each other's; each image is then processed again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path
from typing import Any

from ...chat_request import ChatRequest, ImagePart
from ...errors import invalid
from ...images import ImageError, open_image
from ..prompt.prepare import Prepared
from .mlx import MLXBackend, read_json
from ..cache.entries import ImageRun, kv_trimmable
from ..cache.handoff import HandOffs, or_handed

log = logging.getLogger("tinytitan.vision")

SHADOW = "\ue000tinytitan-image-placeholder\ue000"  # stands in for a placeholder's text inside a message's own text
# model_type → the placeholder its chat template writes for an image (what its processor expands)
FAMILIES = {"gemma3": "boi_token", "mistral3": "image_token", "qwen2_5_vl": "image_token", "qwen3_vl": "image_token",
            "qwen3_vl_moe": "image_token"}
# families whose image tokens take fewer rope positions than there are of them (M-RoPE: see the rules)
SHIFTED = ("qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe")
PREFILL_STEP = 512
IMAGE_CONFIG_FILES = ("config.json", "preprocessor_config.json", "processor_config.json")
KEPT_IMAGE_BYTES = 256 << 20  # processed images (pixel values) kept per model, by digest, for the turns resending them


def is_vision_dir(path: Path) -> bool:
    """Whether a model directory is one this module serves (see the rules)."""
    config = read_json(Path(path) / "config.json")
    return isinstance(config.get("vision_config"), dict) and config.get("model_type") in FAMILIES


def backend_class(path: Path, group=None) -> type:
    """The backend for a model directory: VisionBackend for a vision model of a served family (not under
    mlx.launch: ``group``), else MLXBackend."""
    config = read_json(Path(path) / "config.json")
    if group is not None:
        return MLXBackend
    if isinstance(config.get("vision_config"), dict) and config.get("model_type") not in FAMILIES:
        log.warning("%s: a %s vision model: its images are not read here (Gemma 3, Mistral 3, Qwen2.5-VL and "
                    "Qwen3-VL are); it is served as a text model", path, config.get("model_type"))
    return VisionBackend if is_vision_dir(path) else MLXBackend


class Processed:
    """One image as the model's processor made it: its tokens' text, how many image tokens, the encoder inputs."""

    def __init__(self, text: str, count: int, inputs: dict):
        self.text, self.count, self.inputs = text, count, inputs
        self.nbytes = sum(int(v.nbytes) for v in inputs.values())


class VisionBackend(MLXBackend):
    takes_images = True

    def __init__(self, model_dir, *args, **kwargs):
        from mlx_vlm.utils import get_model_and_args, load_processor

        self.path_of_config = Path(model_dir) / "config.json"
        config = read_json(self.path_of_config)
        get_model_and_args(config)  # imports the family's module, which puts mlx-vlm's own processor in place
        self.processor = load_processor(Path(model_dir), add_detokenizer=False)
        self.images_layout = _images_layout(Path(model_dir))
        self.placeholder = getattr(self.processor, FAMILIES[config["model_type"]])
        self.image_token_id = self._image_token_id()
        self.shifted = config["model_type"] in SHIFTED
        self.merge_size = int(config["vision_config"].get("spatial_merge_size", 2))
        self.vlm = None  # mlx-vlm's model: its vision tower and projector are what is used
        self.encoded_images = 0  # images run through the vision tower since the model loaded
        self.processed_images = 0  # images run through the processor (kept by digest, so once while kept)
        self._processed: "OrderedDict[str, Processed]" = OrderedDict()
        self._lock = threading.Lock()
        super().__init__(model_dir, *args, **kwargs)
        self.prompt_cache.reframe = self.reframe if self.shifted else None

    def _image_token_id(self) -> int:
        """The id whose embeddings the image features replace: config.json's, else the processor's image token."""
        config = read_json(self.path_of_config)
        token_id = config.get("image_token_index", config.get("image_token_id"))
        if token_id is None:
            token_id = self.processor.tokenizer.convert_tokens_to_ids(self.processor.image_token)
        return int(token_id)

    # -- images in the prompt ---------------------------------------------------------------------------------
    def processed(self, part: ImagePart, held: frozenset = frozenset()) -> Processed:
        """What the processor makes of an image (kept per digest): opened here, so a bad one is a 400 first.
        ``held``: the digests of the request it belongs to, kept past the budget until ``let_go`` (a request of
        more images than the budget holds would otherwise evict its own, and process each several times)."""
        with self._lock:
            known = self._processed.get(part.digest)
            if known is not None:
                self._processed.move_to_end(part.digest)
                return known
        image = open_image(part)
        try:
            out = self.processor(text=[self.placeholder], images=[image], add_special_tokens=False,
                                 return_tensors="np")
        except Exception as exc:  # the processor cannot take it (a degenerate size …)
            raise ImageError(f"the model's image processor cannot take it ({exc})", part.where,
                             "invalid_image") from None
        ids = [int(i) for i in _numpy(out["input_ids"])[0]]
        inputs = {k: _numpy(v) for k, v in out.items() if k not in ("input_ids", "attention_mask", "token_type_ids")}
        done = Processed(self.processor.tokenizer.decode(ids, skip_special_tokens=False),
                         ids.count(self.image_token_id), inputs)
        with self._lock:
            self.processed_images += 1
            self._processed[part.digest] = done
            self._trim(held | {part.digest})
        return done

    def let_go(self) -> None:
        """A request's images no longer held past the budget (its images are read, or it was refused)."""
        with self._lock:
            self._trim(frozenset())

    def _trim(self, held: frozenset) -> None:
        """The oldest processed images dropped, those in ``held`` kept, until the rest fit the budget."""
        over = sum(p.nbytes for p in self._processed.values()) - KEPT_IMAGE_BYTES
        for digest in [d for d in self._processed if d not in held]:
            if over <= 0:
                return
            over -= self._processed.pop(digest).nbytes

    def render(self, req: ChatRequest) -> str:
        """The template's text, each image's placeholder replaced by the image's tokens (see the rules)."""
        images = req.images
        if not images:
            return super().render(req)
        text = super().render(self._literal_placeholders_hidden(req))
        pieces = [piece.replace(SHADOW, self.placeholder) for piece in text.split(self.placeholder)]
        if len(pieces) - 1 != len(images):
            where = images[min(len(pieces) - 1, len(images) - 1)].where
            problem = (f"The model's chat template placed {len(pieces) - 1} image(s) of the {len(images)} sent: "
                       f"images are read in user turns{' and tool results' if len(pieces) > 1 else ''} only")
            raise invalid(problem, param=where, code="invalid_image", data={"where": where, "problem": problem})
        out, held = [pieces[0]], _digests(images)
        for part, rest in zip(images, pieces[1:]):
            out += [self.processed(part, held).text, rest]
        return "".join(out)

    def _literal_placeholders_hidden(self, req: ChatRequest) -> ChatRequest:
        """``req`` with the placeholder's text, wherever the request's own text holds it (a model's earlier answer,
        a pasted template, a call's arguments that write one, a tool's description or schema, the text closing the
        system prompt: ``closing_note``), stood in for by
        ``SHADOW``: only the placeholders the template writes are images."""
        def hide(value):
            if isinstance(value, str):
                return value.replace(self.placeholder, SHADOW)
            if isinstance(value, dict):
                return {hide(k): hide(v) for k, v in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(hide(v) for v in value)
            return value

        def holds(m) -> bool:
            return self.placeholder in (m.content or "") + (m.reasoning or "") + "".join(
                c.arguments for c in m.tool_calls)

        tools = any(self.placeholder in t.description + json.dumps(t.parameters) for t in req.tools)
        if not tools and self.placeholder not in req.closing_note and not any(holds(m) for m in req.messages):
            return req
        grammar = req.grammar and replace(req.grammar, description=hide(req.grammar.description))
        return replace(req, system_note=hide(req.system_note), grammar=grammar, messages=tuple(
            replace(m, content=hide(m.content), reasoning=hide(m.reasoning), parts=tuple(hide(p) for p in m.parts),
                    tool_calls=tuple(replace(c, arguments=hide(c.arguments)) for c in m.tool_calls))
            for m in req.messages), tools=tuple(replace(t, description=hide(t.description),
                                                        parameters=hide(t.parameters)) for t in req.tools))

    def image_runs(self, tokens: list[int], req: ChatRequest) -> tuple[ImageRun, ...]:
        """Each image's span of the prompt: from its first image token to its last."""
        runs, at, held = [], 0, _digests(req.images)
        for part in req.images:
            count = self.processed(part, held).count
            start = tokens.index(self.image_token_id, at) if count else at
            seen, end = 0, start
            while seen < count:
                seen += tokens[end] == self.image_token_id
                end += 1
            runs.append(ImageRun(start, end, part.digest, self._rope_delta(part, held) if self.shifted else 0))
            at = end
        return tuple(runs)

    def _rope_delta(self, part: ImagePart, held: frozenset) -> int:
        """How many rope positions fewer than tokens an image takes (M-RoPE: its merged grid's longer side)."""
        t, h, w = (int(x) for x in self.processed(part, held).inputs["image_grid_thw"][0])
        rows, cols = h // self.merge_size, w // self.merge_size
        return max(t, rows, cols) - t * rows * cols

    def prepare(self, req: ChatRequest) -> Prepared:
        try:
            prepared = super().prepare(req)
            prepared.image_runs = self.image_runs(prepared.tokens, prepared.req)
        except BaseException:
            self.let_go()
            raise
        return prepared

    def count_tokens(self, req: ChatRequest) -> int:
        try:
            return super().count_tokens(req)
        finally:  # counted, never read: its images are not held past the budget
            self.let_go()

    # -- reading the images (model thread) --------------------------------------------------------------------
    def prompt_prefix(self, model, prepared: Prepared,
                      handed: HandOffs | None = None) -> tuple[list | None, int, int]:
        try:
            return self._prefix(model, prepared, handed)
        finally:
            self.let_go()

    def _prefix(self, model, prepared: Prepared, handed: HandOffs | None) -> tuple[list | None, int, int]:
        runs = prepared.image_runs
        shift = -sum(r.rope_delta for r in runs)  # (M-RoPE) where the prompt's keys stand from their positions
        kv, n = or_handed(handed, prepared, *self.prompt_cache.fetch(prepared.tokens, runs, prepared.shared))
        if kv is not None and shift:  # an entry holds its true positions: shifted as this prompt's are
            self.reframe(kv, shift)
        if not runs or n >= runs[-1].end:
            return kv, n, n
        cut = next(r for r in runs if r.end > n)
        if n > cut.start:  # the cached prefix ends inside an image: back to the image's start
            if kv is not None and kv_trimmable(kv):
                for c in kv:
                    c.trim(n - cut.start)
                n = cut.start
            else:
                kv, n = None, 0
        if kv is None:
            kv, n = self.new_cache(model), 0
        end = runs[-1].end
        if end >= len(prepared.tokens):
            raise invalid("The prompt ends inside an image: nothing follows it to answer from", param="messages")
        import contextlib

        import mlx.core as mx

        with mx.stream(self.stream) if self.stream is not None else contextlib.nullcontext():
            self._read(model, kv, prepared, n, end, shift)
        return kv, end, n

    def _read(self, model, kv: list, prepared: Prepared, start: int, end: int, shift: int = 0) -> None:
        """Prompt tokens ``start:end`` into ``kv``: the images in them encoded, the text embedded, read in chunks.
        One image is encoded at a time, with the text before it: the vision tower's attention over a batch of
        images is one array (images × heads × patches²), which past 2**31 elements crashes mlx's CPU kernels
        (65 images of the demo vision model, 9 of a real Gemma 3) and holds gigabytes for the whole batch."""
        import mlx.core as mx
        import numpy as np

        parts, held = {p.digest: p for p in prepared.req.images}, _digests(prepared.req.images)
        runs = [r for r in prepared.image_runs if r.start >= start]
        positions = None
        if self.shifted:  # every image's grid, for the true positions of the whole prompt
            grids = np.concatenate([self.processed(parts[r.digest], held).inputs["image_grid_thw"]
                                    for r in prepared.image_runs])
            positions, _ = self.vlm.language_model.get_rope_index(mx.array(prepared.tokens)[None], mx.array(grids))
            positions = positions[:, :, start:end] + shift
        at = start
        for r in runs:  # each segment: the text since the last image, and this image
            one = self.processed(parts[r.digest], held)
            self._read_segment(model, kv, prepared, one, at, r.end, start, positions)
            self.encoded_images += 1
            at = r.end
        mx.clear_cache()
        log.debug("%s: read %d image(s) and %d prompt tokens from their embeddings", self.model_id, len(runs),
                  end - start)

    def _read_segment(self, model, kv: list, prepared: Prepared, image: Processed, a0: int, b0: int, start: int,
                      positions) -> None:
        """Prompt tokens ``a0:b0`` (one image, the text before it) into ``kv``; ``positions`` from ``start``."""
        import mlx.core as mx

        ids = mx.array(prepared.tokens[a0:b0])[None]
        inputs = {k: mx.array(v) for k, v in image.inputs.items()}
        pixel_values = inputs.pop("pixel_values")
        features = self.vlm.get_input_embeddings(ids, pixel_values, mask=mx.ones(ids.shape, dtype=mx.int32),
                                                 **inputs)
        embedded = features.inputs_embeds
        # Qwen3-VL's deepstack: image features also added into early decoder layers, read with the whole segment
        deepstack = {k: getattr(features, k) for k in ("visual_pos_masks", "deepstack_visual_embeds")
                     if getattr(features, k, None) is not None} if self.shifted else {}
        step = b0 - a0 if deepstack.get("deepstack_visual_embeds") is not None else PREFILL_STEP
        for a in range(0, b0 - a0, step):
            b = min(a + step, b0 - a0)
            if positions is None:
                model(ids[:, a:b], cache=kv, input_embeddings=embedded[:, a:b])
            else:
                self.vlm.language_model(ids[:, a:b], inputs_embeds=embedded[:, a:b], cache=kv,
                                        position_ids=positions[:, :, a0 - start + a:a0 - start + b], **deepstack)
            mx.eval([c.state for c in kv])

    # -- weights ----------------------------------------------------------------------------------------------
    def ensure_loaded(self):
        model = super().ensure_loaded()
        if self.vlm is None and model is not None:
            import mlx.core as mx
            from mlx.utils import tree_flatten
            from mlx_vlm.utils import load_model

            vlm = load_model(self.path, lazy=True)
            # one set of language weights: mlx-lm's arrays in mlx-vlm's language model (its own never read)
            vlm.language_model.load_weights(tree_flatten(model.language_model.parameters()), strict=False)
            mx.eval([v for k, v in tree_flatten(vlm.parameters()) if not k.startswith("language_model.")])
            self.vlm, self.encoded_images = vlm, 0
        return model

    def reframe(self, kv: list, shift: int) -> None:
        """Every cached key moved ``shift`` rope positions (the rotation rope applies, once more)."""
        import mlx.core as mx

        rope = self.ensure_loaded().language_model.model.layers[0].self_attn.rope
        for c in kv:
            if c.empty():
                continue
            state = c.state  # (keys, values[, offset]): the keys are rope's output
            keys = state[0]
            flat = keys.reshape(-1, 1, keys.shape[-1])
            moved = mx.fast.rope(flat, rope.dims, traditional=rope.traditional, base=rope.base, scale=rope.scale,
                                 offset=shift)
            c.state = (moved.reshape(keys.shape).astype(keys.dtype), *state[1:])

    def unload(self) -> bool:
        self.vlm = None
        return super().unload()


def _images_layout(model_dir: Path) -> str:
    """A digest of the files that make an image's tokens and embeddings besides the weights (the vision tower's
    configuration, the processor's: a lower ``max_pixels`` gives the same image fewer tokens), as they were read:
    the prompt cache on disk never reads an image's KV made under another (disk_files.layout_of)."""
    h = hashlib.sha256()
    for name in IMAGE_CONFIG_FILES:
        try:
            h.update(f"{name}\n".encode() + (model_dir / name).read_bytes() + b"\n")
        except OSError:
            pass
    return h.hexdigest()[:16]


def _digests(images) -> frozenset:
    return frozenset(p.digest for p in images)


def _numpy(value: Any):
    import numpy as np

    return np.asarray(value)
