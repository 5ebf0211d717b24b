"""Images in chat messages: read, check and decode them, then hand them to the model's processor.

The server and the CLI both come here (the CLI turns `--image PATH` into a data: URL), so an
image gives the same pixels, tokens and answer on every front door. Every refusal is an
InvalidRequest (400, one CLI line) naming the content part: too many images, a remote URL the
operator did not allow, bytes over the cap, a format Pillow cannot read, a header declaring
more pixels than allowed (checked before any pixel is decoded: a decompression bomb is never
inflated), a corrupt or truncated file. Limits: config.SETTINGS (max_images, image_max_bytes,
image_max_pixels, allow_image_urls, image_url_seconds).
"""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mlxd.config import setting_float, setting_int
from mlxd.errors import InvalidRequest, one_line

if TYPE_CHECKING:
    from PIL.Image import Image

    from mlxd.types import ImageInputs, ImageProcessor

__all__ = [
    "FORMATS",
    "ImageRef",
    "data_url",
    "file_part",
    "image_bytes",
    "image_url",
    "load_images",
    "read_image",
]

# What Pillow decodes that a chat client sends; others (TIFF, PSD, ICO, ...) are refused.
FORMATS = frozenset({"PNG", "JPEG", "WEBP", "GIF", "BMP"})
_MEDIA_TYPES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp",
                "GIF": "image/gif", "BMP": "image/bmp"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class ImageRef:
    """An image content part's URL and where it sits in the request (for errors)."""

    url: str
    param: str


def image_url(part: Mapping[str, Any], param: str) -> ImageRef:
    """The URL of an OpenAI `image_url` content part (`{"url": ...}` or a bare string)."""
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, Mapping) else value
    if not isinstance(url, str) or not url:
        raise InvalidRequest("image_url part needs a string 'url'", param=f"{param}.image_url")
    return ImageRef(url, f"{param}.image_url")


def data_url(data: bytes) -> str:
    """`data:image/...;base64,...` for raw image bytes (the CLI's --image and /image)."""
    kind = _sniff(data)
    return f"data:{_MEDIA_TYPES.get(kind or '', 'image/unknown')};base64," + (
        base64.b64encode(data).decode("ascii")
    )


def file_part(path: str) -> dict[str, Any]:
    """An image_url content part holding the image file at `path` (the CLI's --image and
    /image): the file goes through the same checks as a request's data: URL."""
    from pathlib import Path

    param = f"image {path}"
    file = Path(path).expanduser()
    try:
        _check_size(file.stat().st_size, param)
        data = file.read_bytes()
    except OSError as exc:
        raise InvalidRequest(f"cannot read {path}: {exc.strerror}", param="image") from None
    return {"type": "image_url", "image_url": {"url": data_url(data)}}


def image_bytes(part: Mapping[str, Any]) -> bytes:
    """The bytes of an image part holding a data: URL (file_part's)."""
    ref = image_url(part, "image")
    return _decode_data_url(ref.url, ref.param)


def load_images(
    refs: list[ImageRef], processor: ImageProcessor | None, *, allow_urls: bool = False
) -> ImageInputs | None:
    """Fetch, check, decode and preprocess `refs` in order; None when there are none."""
    if not refs:
        return None
    if processor is None:
        raise InvalidRequest(
            "this model takes text only: it cannot read images (use a vision model)",
            param=refs[0].param,
        )
    limit = setting_int("max_images")
    if len(refs) > limit:
        raise InvalidRequest(
            f"too many images: {len(refs)} in the request, at most {limit} (MLXD_MAX_IMAGES)",
            param=refs[limit].param,
        )
    from mlxd.types import ImageInputs

    prepared = []
    for ref in refs:
        image = read_image(_fetch(ref, allow_urls), ref.param)
        try:
            prepared.append(processor.prepare(image))
        except Exception as exc:  # the processor is library code: any failure is this image's
            raise InvalidRequest(
                f"the model's image processor cannot use this image: {one_line(exc)}",
                param=ref.param,
            ) from None
    return ImageInputs(tuple(prepared), processor.image_token_id, processor.image_token)


def read_image(data: bytes, param: str) -> Image:
    """Decode checked image bytes into an RGB image, or raise InvalidRequest saying why."""
    from PIL import Image as PILImage
    from PIL import UnidentifiedImageError

    _check_size(len(data), param)
    max_pixels = setting_int("image_max_pixels")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            image = PILImage.open(io.BytesIO(data))  # reads the header only
    except (PILImage.DecompressionBombError, PILImage.DecompressionBombWarning):
        raise _bomb(param, max_pixels) from None
    except UnidentifiedImageError:
        raise InvalidRequest(_unreadable(), param=param) from None
    except Exception as exc:  # a broken header
        message = f"corrupt image: {one_line(exc, with_type=False)}"
        raise InvalidRequest(message, param=param) from None
    if image.format not in FORMATS:
        raise InvalidRequest(
            f"unsupported image format {image.format}: send {_formats()}", param=param
        )
    width, height = image.size
    if width <= 0 or height <= 0:
        raise InvalidRequest("the image has no pixels", param=param)
    if width * height > max_pixels:
        raise _bomb(param, max_pixels, width, height)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", PILImage.DecompressionBombWarning)
            image.load()
            return image.convert("RGB")
    except Exception as exc:  # truncated data, bad compressed stream, ...
        raise InvalidRequest(
            f"corrupt or truncated image: {one_line(exc, with_type=False)}", param=param
        ) from None


def _fetch(ref: ImageRef, allow_urls: bool) -> bytes:
    url = ref.url
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "data":
        return _decode_data_url(url, ref.param)
    if scheme in ("http", "https"):
        if not allow_urls:
            raise InvalidRequest(
                "remote image URLs are refused: this server does not fetch URLs; send the "
                "image inline as a data: URL (base64), or start the server with "
                "--allow-image-urls",
                param=ref.param,
            )
        return _download(url, ref.param)
    raise InvalidRequest("image URL must be a data: URL (or http(s) if allowed)", param=ref.param)


def _decode_data_url(url: str, param: str) -> bytes:
    head, sep, payload = url.partition(",")
    if not sep or not head.lower().endswith(";base64"):
        raise InvalidRequest("image data: URL must be base64 ('data:image/...;base64,...')",
                             param=param)  # fmt: skip
    media = head[5:].split(";", 1)[0].strip().lower()
    if media and not media.startswith("image/"):
        raise InvalidRequest(f"data: URL media type {media!r} is not an image", param=param)
    _check_size(len(payload) * 3 // 4, param)  # refused before decoding anything
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidRequest("image data: URL is not valid base64", param=param) from None


def _download(url: str, param: str) -> bytes:
    import urllib.error
    import urllib.request

    cap = setting_int("image_max_bytes")
    seconds = setting_float("image_url_seconds")
    request = urllib.request.Request(url, headers={"User-Agent": "mlxd"})
    try:
        with urllib.request.urlopen(request, timeout=seconds) as response:  # noqa: S310
            data: bytes = response.read(cap + 1)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise InvalidRequest(
            f"cannot fetch the image URL: {one_line(exc, with_type=False)}", param=param
        ) from None
    _check_size(len(data), param)
    return data


def _check_size(size: int, param: str) -> None:
    cap = setting_int("image_max_bytes")
    if size > cap:
        raise InvalidRequest(
            f"image is too large: more than {cap} bytes (MLXD_IMAGE_MAX_BYTES)", param=param
        )
    if size == 0:
        raise InvalidRequest("image is empty", param=param)


def _bomb(param: str, limit: int, width: int = 0, height: int = 0) -> InvalidRequest:
    size = f"{width}x{height} = {width * height} pixels" if width else "a huge pixel count"
    return InvalidRequest(
        f"image declares {size}, more than {limit} (MLXD_IMAGE_MAX_PIXELS); refused before "
        f"decoding (decompression bomb guard)",
        param=param,
    )


def _unreadable() -> str:
    return f"not an image, or a format mlxd does not read (send {_formats()})"


def _formats() -> str:
    return ", ".join(sorted(FORMATS))


def _sniff(data: bytes) -> str | None:
    signatures = ((b"\x89PNG", "PNG"), (b"\xff\xd8", "JPEG"), (b"GIF8", "GIF"), (b"BM", "BMP"))
    for magic, kind in signatures:
        if data.startswith(magic):
            return kind
    return "WEBP" if data[:4] == b"RIFF" and data[8:12] == b"WEBP" else None
