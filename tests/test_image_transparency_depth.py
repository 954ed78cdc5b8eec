"""An image is read as the models' own processors read it (transformers' ``convert_to_rgb``), not destroyed on the
way: transparency is laid over white (a PNG's transparent pixels keep whatever colour was stored under them —
black, as Pillow, browsers' canvases and many tools store it — so black text on a transparent background reached
the model as a black square), and a 16-bit grayscale PNG is scaled to 8 bits (Pillow's conversion clipped it at 255:
all but the darkest 1/256 of its range white)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from tinytitan import images


def saved(img: Image.Image, fmt: str = "PNG", **options) -> bytes:
    out = io.BytesIO()
    img.save(out, fmt, **options)
    return out.getvalue()


def black_dot_on_transparent(mode: str) -> Image.Image:
    """A transparent 8×6 picture (stored black under its transparency) with one opaque black pixel at (2, 2)."""
    rgba = Image.new("RGBA", (8, 6), (0, 0, 0, 0))
    rgba.putpixel((2, 2), (0, 0, 0, 255))
    if mode == "RGBA":
        return rgba
    if mode == "LA":
        return rgba.convert("LA")
    palette = Image.new("P", (8, 6), 1)  # index 1 (near black) is the transparent one; index 0 black
    palette.putpalette([0, 0, 0, 0, 0, 1])
    palette.putpixel((2, 2), 0)
    palette.info["transparency"] = 1
    return palette


@pytest.mark.parametrize("mode,fmt", [("RGBA", "PNG"), ("LA", "PNG"), ("P", "PNG"), ("RGBA", "WEBP"), ("P", "GIF")])
def test_transparency_is_laid_over_white(mode, fmt):
    img = black_dot_on_transparent(mode)
    options = {"transparency": 1} if mode == "P" else {"lossless": True} if fmt == "WEBP" else {}
    opened = images.open_image(images.part(saved(img, fmt, **options), "", "messages[0].content[0]"))
    assert opened.mode == "RGB"
    assert opened.getpixel((0, 0)) == (255, 255, 255)  # the transparent background
    assert opened.getpixel((2, 2)) == (0, 0, 0)  # the opaque dot


def test_half_transparent_pixels_blend_with_white():
    img = Image.new("RGBA", (4, 4), (0, 0, 0, 128))
    opened = images.open_image(images.part(saved(img), "", "w"))
    assert all(abs(c - 127) <= 1 for c in opened.getpixel((1, 1)))


def test_a_16_bit_grayscale_png_keeps_its_range():
    ramp = np.linspace(0, 65535, 64 * 48).astype(np.uint16).reshape(48, 64)
    data = saved(Image.fromarray(ramp))
    assert Image.open(io.BytesIO(data)).mode.startswith("I")  # (how Pillow opens it: the case this holds)
    opened = np.asarray(images.open_image(images.part(data, "image/png", "w")))
    assert opened.shape == (48, 64, 3) and (opened[..., 0] == opened[..., 2]).all()
    assert opened[0, 0, 0] == 0 and opened[-1, -1, 0] == 255
    assert abs(int(opened[24, 0, 0]) - 128) <= 2  # the middle row is mid-gray, not white
    assert (opened[..., 0] == 255).mean() < 0.01


def test_opaque_images_are_unchanged():
    img = Image.new("RGB", (8, 6), (10, 20, 30))
    assert images.open_image(images.part(saved(img), "", "w")).getpixel((3, 3)) == (10, 20, 30)
    gray = Image.new("L", (8, 6), 77)
    assert images.open_image(images.part(saved(gray), "", "w")).getpixel((3, 3)) == (77, 77, 77)


def test_a_16_bit_grayscale_pngs_transparent_level_stays_transparent():
    """A 16-bit grayscale PNG's tRNS chunk names one 16-bit gray level as transparent: it is matched before the
    scaling to 8 bits (it was lost there, so the background reached the model as its stored gray)."""
    wide = np.full((6, 8), 40000, np.uint16)
    wide[2, 2] = 0
    wide[3, 3] = 40001  # one level off the transparent one: opaque
    data = saved(Image.fromarray(wide), transparency=40000)
    assert Image.open(io.BytesIO(data)).info.get("transparency") == 40000  # (the case this holds)
    opened = images.open_image(images.part(data, "image/png", "w"))
    assert opened.getpixel((0, 0)) == (255, 255, 255)
    assert opened.getpixel((2, 2)) == (0, 0, 0)
    assert opened.getpixel((3, 3)) == (156, 156, 156)
