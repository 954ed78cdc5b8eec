"""Images in a request: from each protocol's spelling to an ``ImagePart``, and the checks every image passes.

Neither engine nor protocol code: a protocol decodes its spelling with ``from_url`` / ``from_base64`` /
``part``; ``check_request`` refuses what no model here may read; the engine's vision path opens an image with
``open_image``. Every refusal is an ``ImageError`` (a 400, ``invalid_request``) naming the request part
(``where``: ``messages[2].content[1]``); a protocol words it its own way from ``code`` and ``data``.

Rules:
- Formats: PNG, JPEG, GIF (its first frame) and WebP, recognised from the bytes (Pillow), whatever media type
  the client declared; a declared media type other than these four is refused as unsupported, and so are the bytes
  of another format, by its name (HEIC, SVG and AVIF too where Pillow does not open them: ``_unread_format``). A
  protocol whose API refuses bytes of another format than the declared one (Anthropic's) asks ``check_declared``.
- Limits, per image: ``MAX_BYTES`` of data (20 MiB, as decoded from base64: the line breaks of base64 wrapped in
  lines are not data), ``MAX_SIDE`` pixels on either side and ``MAX_PIXELS`` in all (8192 and 33,554,432 =
  8192 × 4096, so a 6K screenshot passes); per request ``MAX_IMAGES`` images (100, as Anthropic allows). These
  bound what is decoded; fitting an image to the model's own input size (its processor's resize) is the engine's
  work, done after ``open_image``, which gives RGB as the models' own processors make it: transparency over
  white, a 16-bit grayscale PNG scaled to 8 bits.
- A remote ``http(s)`` URL is fetched only where the operator turned fetching on (``--fetch-images``, see
  ``tinytitan/http/fetch.py``); otherwise it is refused by name. Other URL schemes, and ``file_id``
  references, are refused by name.
- A request with images for a model that does not read them is refused with ``ImageInputUnsupported``, naming
  the first image (``refuse_unseen``; the engine asks it, the model's ``takes_images`` decides).
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import io
import re
import warnings

from .chat_request import ChatRequest, ImagePart
from .errors import ApiError

MAX_BYTES = 20 * 1024 * 1024
MAX_SIDE = 8192
MAX_PIXELS = 8192 * 4096
MAX_IMAGES = 100  # Anthropic's own cap a request: an agent that keeps its screenshots meets no lower one here
FORMATS = {"PNG": "image/png", "JPEG": "image/jpeg", "GIF": "image/gif", "WEBP": "image/webp"}
MEDIA_TYPES = frozenset(FORMATS.values()) | {"image/jpg"}
# Pillow's names for files of those formats under another name: a JPEG with the Multi-Picture extension (many phone
# and camera photos: a depth map, a gain map or a preview after the picture) opens as MPO; its first picture is the
# JPEG every API reads
ALIASES = {"MPO": "JPEG"}
# HEIF brands (an ISO media file's ``ftyp``: an iPhone's photos are HEIC), for naming what Pillow does not open;
# mif1/msf1 are HEIF's generic brands, an AVIF's too where it lists avif/avis among its compatible brands (a
# Pillow without AVIF support, before 11.2, opens no AVIF either)
HEIF_BRANDS = frozenset({b"heic", b"heix", b"heim", b"heis", b"hevc", b"hevx", b"hevm", b"hevs", b"mif1", b"msf1"})
AVIF_BRANDS = frozenset({b"avif", b"avis"})
# an SVG document's start: its root element ``svg``, after what may precede it (an XML declaration, comments, a
# DOCTYPE with its internal subset: Illustrator's); an HTML page holding an inline ``<svg>`` icon is no SVG
_SVG_ROOT = re.compile(rb"(?:\s|<\?.*?\?>|<!--.*?-->|<!DOCTYPE[^\[>]*(?:\[.*?\])?\s*>)*<(?:[\w.-]+:)?svg[\s/>]",
                       re.S | re.I)
TRANSCRIPT_MARK = "[image]"  # what an image is in a transcript's text (a summary's input, for a model that reads none)


def transcript_text(parts) -> str:
    """A transcript of text and images in order, as text: each image stands as ``TRANSCRIPT_MARK``."""
    return "".join(p if isinstance(p, str) else TRANSCRIPT_MARK for p in parts)

_DATA_URL = re.compile(r"data:(?P<type>[^;,]*)(?P<params>(;[^;,]*)*),(?P<data>.*)", re.S | re.I)


class ImageError(ApiError):
    """An image this server cannot take, named by its request part. ``code``: ``invalid_image`` (not an image,
    or damaged), ``invalid_image_format`` (an image of a format not taken), ``image_too_large`` (bytes or
    pixels), ``too_many_images``, ``image_url_not_allowed`` (a remote or otherwise unusable reference);
    ``data``: ``where`` and, by code, ``limit`` / ``size``."""

    def __init__(self, message: str, where: str, code: str, **data):
        super().__init__("invalid_request", f"{where}: {message}", param=where, code=code,
                         data={"where": where, "problem": message, **data})


class ImageInputUnsupported(ApiError):
    """Images sent to a model that reads text only. ``data``: ``where`` (the first image), ``model``, ``count``
    (the protocols word it as their APIs do for a model without vision)."""

    def __init__(self, where: str, model: str, count: int):
        super().__init__("invalid_request", f"{where}: the model '{model}' reads text only: it cannot take "
                         f"images ({count} in this request)", param=where, code="image_input_unsupported",
                         data={"where": where, "model": model, "count": count})


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    format: str  # PNG, JPEG, GIF, WEBP
    media_type: str
    width: int
    height: int


# An image's digest keys the pixels the model reads (the prompt cache, on disk too, stores its KV under it), so it
# covers how the bytes become pixels: a change to ``open_image`` that gives other pixels for the same bytes bumps
# this, and a prefix cached from the old pixels is never served again (2: transparency laid over white; 3: a 16-bit
# grayscale PNG's tRNS level kept).
PIXELS_VERSION = b"tinytitan-pixels-3:"


# -- from a protocol's spelling --------------------------------------------------------------------------------
def part(data: bytes, media_type: str, where: str) -> ImagePart:
    """The bytes of an image as sent: within the byte limit, keyed by their digest (not yet opened)."""
    media_type = (media_type or "").strip().lower()
    if media_type and media_type not in MEDIA_TYPES:
        raise ImageError(f"media type '{media_type}' is not supported: send PNG, JPEG, GIF or WebP images",
                         where, "invalid_image_format")
    if not data:
        raise ImageError("image cannot be empty", where, "invalid_image")
    if len(data) > MAX_BYTES:
        raise ImageError(f"image exceeds {MAX_BYTES} bytes maximum: {len(data)} bytes > {MAX_BYTES} bytes",
                         where, "image_too_large", limit=MAX_BYTES, size=len(data))
    return ImagePart(data=data, media_type=media_type, digest=hashlib.sha256(PIXELS_VERSION + data).hexdigest(),
                     where=where)


def from_base64(text: str, media_type: str, where: str) -> ImagePart:
    """Base64 text (Anthropic's ``source.data``, Ollama's ``images``, a data URL's payload) → an ImagePart."""
    text = re.sub(r"\s+", "", text)  # (base64 wrapped in lines: its line breaks are no data, nor over the limit)
    if len(text) > (MAX_BYTES + 2) // 3 * 4 + 4:  # refused before decoding what is over the limit anyway
        size = len(text) * 3 // 4 - text[-2:].count("=")
        raise ImageError(f"image exceeds {MAX_BYTES} bytes maximum: about {size} bytes > {MAX_BYTES} bytes",
                         where, "image_too_large", limit=MAX_BYTES, size=size)
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ImageError("the image data is not valid base64", where, "invalid_image") from None
    return part(data, media_type, where)


def check_declared(image: ImagePart, **data) -> ImagePart:
    """Bytes of another format than the media type the client declared are an ``ImageError``
    (``image_media_type_mismatch``; ``data``: ``declared``, ``actual``, and what the caller adds, such as its
    API's spelling of the place); bytes of no format taken are left to ``inspect``. The part is returned with its
    header read, so that ``inspect`` does not open it again."""
    image = _with_header(image)
    declared = "image/jpeg" if image.media_type == "image/jpg" else image.media_type
    actual = FORMATS.get(image.header.format)
    if declared and actual and actual != declared:
        raise ImageError(f"the image was declared {declared}, but its data is {actual}", image.where,
                         "image_media_type_mismatch", declared=declared, actual=actual, **data)
    return image


def is_remote(url: str) -> bool:
    return url.lstrip()[:8].lower().startswith(("http://", "https://"))


def from_url(url: str, where: str) -> ImagePart:
    """An image URL as the OpenAI APIs spell it: a ``data:image/…;base64,`` URL. A remote one reaches here only
    when fetching is off (a fetching server replaced it with the data it fetched): it is refused by name. Blanks
    around it are no part of it (a client that formats its URLs leaves them)."""
    url = url.strip()
    if is_remote(url):
        raise ImageError("remote image URLs are not fetched by this server: send the image inline as a base64 "
                         "data URL (or start the server with --fetch-images)", where, "image_url_not_allowed")
    m = _DATA_URL.fullmatch(url.strip()) if url[:5].lower() == "data:" else None
    if m is None:
        scheme = url.split(":", 1)[0][:20] if ":" in url else ""
        raise ImageError(f"image URL scheme '{scheme}' is not supported: send a base64 data URL "
                         "(data:image/png;base64,…)" if scheme else
                         "the image URL is not a URL: send a base64 data URL (data:image/png;base64,…)",
                         where, "image_url_not_allowed")
    if "base64" not in [p.strip().lower() for p in m["params"].split(";")]:
        raise ImageError("the data URL is not base64-encoded: send data:<media type>;base64,<data>", where,
                         "invalid_image")
    return from_base64(m["data"], m["type"], where)


# -- the checks --------------------------------------------------------------------------------------------
def inspect(image: ImagePart) -> ImageInfo:
    """Its format and size, read from the header (no pixel is decoded), within the limits; damage a structural
    check finds (PNG chunk checksums, a truncated header) is refused here too."""
    header = _with_header(image).header
    if header.refusal is not None:
        message, code, data = header.refusal
        raise ImageError(message, image.where, code, **data)
    return ImageInfo(header.format, FORMATS[header.format], header.width, header.height)


@dataclasses.dataclass(frozen=True)
class _Header:
    """What an image's header said, read once: the format Pillow opened it as (``ALIASES`` applied; "" where it
    did not open it), its size, and why ``inspect`` refuses it (an ImageError's message, code and data), if it
    does."""
    format: str
    width: int = 0
    height: int = 0
    refusal: tuple[str, str, dict] | None = None


def _with_header(image: ImagePart) -> ImagePart:
    """The part with its header read (``ImagePart.header``): opened here unless it was already."""
    if image.header is None:
        image = dataclasses.replace(image, header=_read_header(image.data))
    return image


def _read_header(data: bytes) -> _Header:
    from PIL import Image, UnidentifiedImageError

    fmt = ""
    with warnings.catch_warnings(record=True) as caught:  # (Pillow's warnings are not the client's business)
        warnings.simplefilter("always", Image.DecompressionBombWarning)
        try:
            with Image.open(io.BytesIO(data)) as img:
                fmt, (width, height) = ALIASES.get(img.format or "", img.format or ""), img.size
                if any(issubclass(w.category, Image.DecompressionBombWarning) for w in caught):
                    return _Header(fmt, width, height, _too_many_pixels())
                refusal = _within(fmt, width, height)
                if refusal is None:
                    img.verify()
                return _Header(fmt, width, height, refusal)
        except UnidentifiedImageError:
            named = _unread_format(data)
            if named:
                return _Header(named, refusal=(f"image format {named} is not supported: send PNG, JPEG, GIF or WebP",
                                               "invalid_image_format", {}))
            return _Header(fmt, refusal=("the data is not a valid image: send PNG, JPEG, GIF or WebP", "invalid_image",
                                         {}))
        except Image.DecompressionBombError:
            return _Header(fmt, refusal=_too_many_pixels())
        except Exception as exc:  # Pillow's decoders raise OSError, SyntaxError, ValueError … on damaged data
            return _Header(fmt, refusal=(f"the image is damaged or truncated ({_reason(exc)})", "invalid_image", {}))


def _unread_format(data: bytes) -> str:
    """The name of an image format Pillow does not open, from its first bytes ("" for none): HEIC (the photos of
    an iPhone, sent as they are where no media type is declared: Ollama's ``images``), AVIF and SVG."""
    if data[4:8] == b"ftyp":  # the ftyp box: its size, "ftyp", the major brand, a version, the compatible brands
        box = data[8:min(int.from_bytes(data[:4], "big"), 64)]
        compatible = {box[i:i + 4] for i in range(8, len(box) - 3, 4)}
        if box[:4] in AVIF_BRANDS or box[:4] in (b"mif1", b"msf1") and compatible & AVIF_BRANDS:
            return "AVIF"
        if box[:4] in HEIF_BRANDS:
            return "HEIC"
    return "SVG" if _SVG_ROOT.match(data[:4096].removeprefix(b"\xef\xbb\xbf")) else ""


def _too_many_pixels() -> tuple[str, str, dict]:
    return f"image dimensions exceed the maximum of {MAX_PIXELS} pixels", "image_too_large", {"limit": MAX_PIXELS}


def _within(fmt: str, width: int, height: int) -> tuple[str, str, dict] | None:
    if fmt not in FORMATS:
        return (f"image format {fmt or 'unknown'} is not supported: send PNG, JPEG, GIF or WebP",
                "invalid_image_format", {})
    if width < 1 or height < 1:
        return "image cannot be empty (0 pixels)", "invalid_image", {}
    if max(width, height) > MAX_SIDE or width * height > MAX_PIXELS:
        return (f"image dimensions exceed the maximum ({width}x{height}; at most {MAX_SIDE} pixels a side and "
                f"{MAX_PIXELS} in all)", "image_too_large", {"limit": MAX_PIXELS, "size": width * height})
    return None


def _reason(exc: Exception) -> str:
    return (str(exc) or type(exc).__name__)[:120]


def check_request(req: ChatRequest) -> tuple[ImageInfo, ...]:
    """Every image of a request within the limits (count, then each one's header); their infos, in order."""
    images = req.images
    if len(images) > MAX_IMAGES:
        where = images[MAX_IMAGES].where
        raise ImageError(f"too many images in one request: {len(images)} > {MAX_IMAGES} (images exceed the API "
                         "limit)", where, "too_many_images", limit=MAX_IMAGES, size=len(images))
    return tuple(inspect(image) for image in images)


def refuse_unseen(req: ChatRequest, takes_images: bool, model: str) -> None:
    """A request with images for a model that reads none: refused, naming the first image."""
    images = req.images
    if images and not takes_images:
        raise ImageInputUnsupported(images[0].where, model, len(images))


def open_image(image: ImagePart):
    """The image decoded, for a vision model's processor: a ``PIL.Image.Image`` in RGB, turned upright as its
    EXIF orientation says (a GIF: its first frame), after the same checks as ``inspect``. Damage found only
    while decoding is an ``ImageError`` naming the part. Its size is the image's own: resizing to the model's
    input is the caller's (the model processor's) work."""
    from PIL import Image, ImageOps

    inspect(image)
    try:
        with Image.open(io.BytesIO(image.data)) as img:
            img.load()
            return _rgb(ImageOps.exif_transpose(img))
    except Exception as exc:
        raise ImageError(f"the image is damaged or truncated ({_reason(exc)})", image.where,
                         "invalid_image") from None


def _rgb(img):
    """Any mode those formats open in, as RGB the way the models' own processors make it (transformers'
    ``convert_to_rgb``): transparency laid over white, not dropped — a PNG's transparent pixels keep whatever
    colour was stored under them, often black, so black text on a transparent background read as a black square.
    A 16-bit grayscale PNG is scaled to 8 bits: Pillow's own conversion clips at 255, which turned all but the
    darkest 1/256 of its range white; its tRNS gray level (the one transparent value) is matched before scaling,
    as 256 levels share each 8-bit one."""
    from PIL import Image

    if img.mode.startswith("I"):  # I;16 (I on older Pillow): 0..65535
        import numpy as np

        wide = np.asarray(img)
        gray = Image.fromarray((np.clip(wide, 0, 65535) >> 8).astype(np.uint8))
        clear = img.info.get("transparency")  # a tRNS gray level, in the 16-bit range: only it is transparent
        if isinstance(clear, int):
            gray.putalpha(Image.fromarray(np.where(wide == clear, 0, 255).astype(np.uint8)))
        img = gray
    if "A" in img.getbands() or "transparency" in img.info:
        rgba = img.convert("RGBA")
        return Image.alpha_composite(Image.new("RGBA", rgba.size, (255, 255, 255, 255)), rgba).convert("RGB")
    return img.convert("RGB")
