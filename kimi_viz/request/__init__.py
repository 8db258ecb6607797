"""The request side: what SGLang builds for one request's images, before the scheduler sees it.

Read in pipeline order: :mod:`.settings` (the server settings that decide it, each with the SGLang
flag it stands for), :mod:`.images` (each image read from its header), :mod:`.producer` (what goes
into one ``MultimodalDataItem``: the deferred config, deferred and eager items), :mod:`.sides`
(which items each release's request side, or its EPD encoder, builds for a request), :mod:`.prompt`
(where each image's media tokens sit in the prompt), :mod:`.chat` (a client's own request and the ids
it reaches the image processor as) and :mod:`.checks` (the request side's checks on them, in SGLang's
order); :mod:`.model_folder` reads a checkpoint folder (``--model-path``) as data, :mod:`.tokenizer`,
:mod:`.chat_encoding` and :mod:`.chat_server` tokenize a chat with it as the server does, and
:mod:`.demo_checkpoint` writes a synthetic one for demos. Names are imported lazily.
"""

from __future__ import annotations

from .._lazy import lazy_exports

_EXPORTS = {
    "ServerSettings": "settings",
    "OPTIONS": "settings",
    "RequestImage": "images",
    "probe_image": "images",
    "probe_images": "images",
    "as_request_image": "images",
    "image_sources": "images",
    "deferred_config": "producer",
    "deferred_item": "producer",
    "eager_item": "producer",
    "BuiltRequest": "sides",
    "build_request": "sides",
    "ChatRequest": "chat",
    "parse_request": "chat",
    "read_request": "chat",
    "Renderer": "chat",
    "render_request": "chat",
    "RequestOutcome": "checks",
    "check_request": "checks",
    "check_releases": "checks",
    "ModelFolder": "model_folder",
    "read_model_folder": "model_folder",
    "write_demo_checkpoint": "demo_checkpoint",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
