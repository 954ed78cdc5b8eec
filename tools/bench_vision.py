"""Images through the engine against raw mlx-vlm, on the same vision model and the same image, in one process.

Prints three ratios (medians over ``--reps``):

* **prefill**: time to the first token of a first turn with one image (nothing cached), through the engine's
  path (a ChatRequest with an ImagePart in ``Engine.session``: template, processor, vision tower, prefill, the
  decoder's step) ÷ raw ``mlx_vlm.stream_generate`` on the same prompt and image (``max_tokens=1``). A new image
  each repetition, so neither side reuses an encoding.
* **second turn**: time to the first token of the next turn (the history resent with the same image, the answer and
  a new question) ÷ the first turn's. The goal is ≤ 0.2: the image comes from the prompt cache, not the encoder.
* **decode**: decode tokens/s with an image in the prompt ÷ the same question without it (``--tokens`` each).

    python tools/bench_vision.py [--model demo-vision|PATH] [--reps 5] [--tokens 64] [--size 640x480]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def noise_png(seed: int, size: tuple[int, int]) -> bytes:
    import numpy as np
    from PIL import Image

    pixels = np.random.RandomState(seed).randint(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "PNG")
    return out.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="demo-vision")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--size", default="640x480")
    args = ap.parse_args()
    size = tuple(int(x) for x in args.size.split("x"))

    from tinytitan.blas import use_fast_blas

    use_fast_blas()  # as `tinytitan serve` does; raw mlx-vlm runs in this process too
    import trio
    from mlx_vlm import load as vlm_load
    from mlx_vlm.generate import stream_generate

    from tinytitan.chat_request import ChatRequest, ImagePart, Message
    from tinytitan.engine.engine import Engine
    from tinytitan.engine.backends.mlx import MLXBackend
    from tinytitan.engine.backends.vision import VisionBackend
    from tinytitan.events import Finished

    if args.model == "demo-vision":
        from tinytitan.demo_model.vision import ensure_demo_vision

        path = ensure_demo_vision()
    else:
        path = Path(args.model)
    backend = VisionBackend(path, "bench")
    engine = Engine(backend, max_batch=4)
    model, processor = vlm_load(str(path))
    question = "What does this screenshot show? Answer in one sentence."

    def image(seed: int) -> ImagePart:
        data = noise_png(seed, size)
        return ImagePart(data, "image/png", hashlib.sha256(data).hexdigest(), "messages[0].content[0]")

    def ask(parts, history=(), max_tokens=1) -> ChatRequest:
        text = "".join(p for p in parts if isinstance(p, str))
        return ChatRequest(model="bench", messages=(*history, Message("user", text, parts=tuple(parts))),
                           temperature=0, max_tokens=max_tokens, speculative=False)

    async def timed(req: ChatRequest) -> tuple[float, Finished]:
        t0 = time.perf_counter()
        async with engine.session(req) as session:
            async for ev in session:
                if isinstance(ev, Finished):
                    return time.perf_counter() - t0, ev
        raise RuntimeError("no Finished event")

    def raw_ttft(req: ChatRequest, data: bytes) -> float:
        prompt = MLXBackend.render(backend, req)  # the template's text; mlx-vlm's processor expands the image
        with tempfile.NamedTemporaryFile(suffix=".png") as f:
            f.write(data)
            f.flush()
            t0 = time.perf_counter()
            for _ in stream_generate(model, processor, prompt, image=[f.name], max_tokens=1, temperature=0.0):
                return time.perf_counter() - t0
        raise RuntimeError("mlx-vlm generated nothing")

    async def run() -> None:
        prefill, second, decode = [], [], []
        await timed(ask([image(10_000), question]))  # warm both paths (compiles, first loads)
        raw_ttft(ask([image(10_001), question]), image(10_001).data)
        for rep in range(args.reps):
            backend.prompt_cache.clear()
            part = image(rep)
            first = ask([part, question])
            t_first, fin = await timed(first)
            t_raw = raw_ttft(ask([image(rep + 500), question]), image(rep + 500).data)
            prefill.append(t_first / t_raw)
            history = (first.messages[0], Message("assistant", "It shows a terminal with a failing test."))
            t_second, _ = await timed(ask(["And what should I fix first?"], history))
            second.append(t_second / t_first)
            _, with_image = await timed(ask([part, question], max_tokens=args.tokens))
            _, without = await timed(ask([question], max_tokens=args.tokens))
            rate = [f.timing.decode_tokens / f.timing.decode_s for f in (with_image, without)]
            decode.append(rate[0] / rate[1])
            print(f"rep {rep}: first turn {t_first:.3f}s, raw mlx-vlm {t_raw:.3f}s, second turn {t_second:.3f}s, "
                  f"decode {rate[0]:.1f} vs {rate[1]:.1f} tok/s (prompt {fin.usage.prompt_tokens} tokens)")
        print(f"model {path.name}, image {args.size}, {args.reps} reps (medians):")
        print(f"  image prefill, engine ÷ raw mlx-vlm:        {statistics.median(prefill):.2f}")
        print(f"  second turn TTFT ÷ first turn's (goal ≤0.2): {statistics.median(second):.2f}")
        print(f"  decode with an image ÷ without:              {statistics.median(decode):.2f}")

    trio.run(run)


if __name__ == "__main__":
    main()
