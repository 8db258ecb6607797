"""A checkpoint folder as input (``--model-path``): what a Kimi server reads from it, read as data, none of it run.

:func:`read_model_folder` takes a folder, or a model id found in the local Hugging Face cache
(:func:`find_cached_model`: ``HF_HUB_CACHE``, else ``HF_HOME/hub``, else ``~/.cache/huggingface/hub``, then
``models--org--name/snapshots/<revision>``; the network is never asked), and returns a :class:`ModelFolder`:

* ``config.json``: its architecture and ``model_type``, and which SGLang model serves it
  (:data:`FAMILIES`): ``KimiK3ForConditionalGeneration`` is ``models/kimi_k3.py`` with the deferred split and the
  ``kimi_k3`` chat encoding; ``KimiK25ForConditionalGeneration`` (Kimi-K2.5, K2.7) is ``models/kimi_k25.py`` with
  its own processor, no deferred split, and a Jinja chat template the kit does not render;
* the ``<|media_pad|>`` id (:class:`PlaceholderId`): every release from 0.5.17 to 0.5.23 takes it from the
  config's ``media_placeholder_token_id`` (163605 when the key is missing, the config class's default) in
  ``multimodal/processors/kimi_k3.py`` and ``kimi_k25.py``, never from the tokenizer, while the chat renders the
  tokenizer's own id for the text ``<|media_pad|>``: when the two differ the processor finds no placeholder,
  and the record says so;
* ``preprocessor_config.json``, read by :func:`~kimi_viz.preprocess.config.load_preprocessor_config`;
* the tokenizer (:func:`~.tokenizer.read_tokenizer`): ``tokenizer_config.json`` must name Kimi's
  ``TikTokenTokenizer`` and the folder must hold its ``tiktoken.model``.

A hostile folder is refused in one line (:class:`~kimi_viz.errors.CheckpointError` or a subclass) before anything
is built from it: a file that is a link out of the folder (or out of the cached model, whose snapshots link to
its blobs), a config that is not bounded JSON, a tokenizer of another format (``tokenizer.json`` alone, a
sentencepiece ``tokenizer.model``), a tokenizer class the kit does not know. Python files in the folder are never
imported, executed or even opened.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from .._records import frozen
from ..errors import CheckpointError, ConfigError, TokenizerError
from ..preprocess.config import ProcessorConfig, load_preprocessor_config, read_checkpoint_config
from ..releases import RELEASES
from .chat_server import MEDIA_PAD
from .tokenizer import CONFIG_FILE, RANKS_FILE, KimiTokenizer, read_tokenizer

Family = Literal["kimi-k3", "kimi-k25"]
DEFAULT_PLACEHOLDER_ID = 163605  # KimiK3Config / KimiK25Config: media_placeholder_token_id default


@frozen
class FamilyFacts:
    """What SGLang runs for one architecture: its model file, whether it defers, its chat encoding."""

    family: Family
    sglang_model: str  # the model file under sglang/srt/
    processor: str  # the request side's processor file
    deferred_split: bool  # get_image_feature splits deferred items (Kimi-K3 only)
    chat_encoding: str | None  # resolve_chat_encoding_spec: "kimi_k3", or None for the Jinja chat template
    note: str


FAMILIES: dict[str, FamilyFacts] = {
    "KimiK3ForConditionalGeneration": FamilyFacts(
        "kimi-k3",
        "models/kimi_k3.py",
        "multimodal/processors/kimi_k3.py",
        deferred_split=True,
        chat_encoding="kimi_k3",
        note="Kimi-K3: the checkpoint's Python chat renderer, the deferred split in get_image_feature",
    ),
    "KimiK25ForConditionalGeneration": FamilyFacts(
        "kimi-k25",
        "models/kimi_k25.py",
        "multimodal/processors/kimi_k25.py",
        deferred_split=False,
        chat_encoding=None,
        note=(
            "Kimi-K2.5/K2.7: served by SGLang's models/kimi_k25.py with its own processor and no deferred split; "
            "its chat is a Jinja chat template, which kimi-viz does not render — it is not Kimi-K3"
        ),
    ),
}

#: Where each release's processor takes the placeholder id from the config: (kimi_k3.py line, kimi_k25.py line).
PLACEHOLDER_SITES: dict[str, tuple[int, int]] = {
    "0.5.17": (309, 525),
    "0.5.18": (388, 525),
    "0.5.19": (388, 525),
    "0.5.20": (388, 529),
    "0.5.21": (388, 529),
    "0.5.22": (388, 529),
    "0.5.23": (395, 542),
}
_MODEL_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_REVISION = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_OTHER_TOKENIZERS = {
    "tokenizer.json": "a Hugging Face tokenizers file",
    "tokenizer.model": "a sentencepiece model",
    "vocab.json": "a byte-level BPE vocabulary",
}


@frozen
class PlaceholderId:
    """The ``<|media_pad|>`` id: as SGLang's processor takes it (the config) and as the tokenizer encodes it."""

    config_id: int | None  # config.json media_placeholder_token_id, None when the key is missing
    resolved: int  # what every release's processor uses: the config's, else 163605
    tokenizer_id: int | None  # the tokenizer's special id for "<|media_pad|>", None when it has none
    by_release: tuple[tuple[str, str], ...]  # release -> "config.json media_placeholder_token_id (file:line)"

    @property
    def mismatch(self) -> str | None:
        """Return one sentence when the processor's id and the tokenizer's differ, else None."""
        if self.tokenizer_id == self.resolved:
            return None
        rendered = "no special token" if self.tokenizer_id is None else f"id {self.tokenizer_id}"
        return (
            f"the processor counts <|media_pad|> as id {self.resolved} (config.json media_placeholder_token_id"
            f"{'' if self.config_id is not None else ', missing: the default'}) but the tokenizer encodes it as "
            f"{rendered}: a chat's image prompts carry no id the processor counts, so every chat with an image fails "
            "its placeholder check (--chat replays one)"
        )


@frozen
class ModelFolder:
    """A checkpoint folder read as data: architecture, the SGLang path serving it, placeholder, limits, tokenizer."""

    path: str  # the folder read (a cache snapshot for a model id)
    asked: str  # what was given: the folder or the model id
    architecture: str
    model_type: str
    facts: FamilyFacts
    placeholder: PlaceholderId
    processor: ProcessorConfig
    tokenizer: KimiTokenizer
    tokenizer_class: str

    @property
    def family(self) -> Family:
        """Return ``kimi-k3`` or ``kimi-k25``."""
        return self.facts.family

    @property
    def is_k3(self) -> bool:
        """Return True for a Kimi-K3 checkpoint (the one whose chat the kit renders)."""
        return self.facts.family == "kimi-k3"


# --- where the folder is -----------------------------------------------------------------------------------------
def hub_cache(environ: Mapping[str, str] | None = None) -> Path:
    """Return the Hugging Face hub cache folder the environment points at (no folder is created)."""
    env = os.environ if environ is None else environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    if env.get("HF_HOME"):
        return Path(env["HF_HOME"]).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def find_cached_model(model_id: str, environ: Mapping[str, str] | None = None) -> Path:
    """Return the snapshot folder of ``model_id`` (``org/name``) in the local hub cache: the revision ``refs/main``
    names, else the only snapshot there is. Raises CheckpointError naming the cache when it is not there."""
    cache = hub_cache(environ)
    if not _MODEL_ID.fullmatch(model_id) or ".." in model_id:
        raise CheckpointError(f"--model-path {model_id!r}: not a folder, nor a model id such as moonshotai/Kimi-K3")
    repo = cache / ("models--" + model_id.replace("/", "--"))
    snapshots = repo / "snapshots"
    if not snapshots.is_dir():
        raise CheckpointError(
            f"--model-path {model_id!r}: not a folder, and not in the Hugging Face cache {cache} (kimi-viz never "
            "downloads): download it first, or pass the checkpoint folder"
        )
    ref = repo / "refs" / "main"
    if ref.is_file() and not ref.is_symlink() and ref.stat().st_size <= 128:
        revision = ref.read_text(encoding="ascii", errors="replace").strip()
        if _REVISION.fullmatch(revision) and (snapshots / revision).is_dir():
            return snapshots / revision
    revisions = sorted(p.name for p in snapshots.iterdir() if p.is_dir() and _REVISION.fullmatch(p.name))[:17]
    if len(revisions) == 1:
        return snapshots / revisions[0]
    shown = ", ".join(revisions[:4]) or "none"
    raise CheckpointError(
        f"--model-path {model_id!r}: {len(revisions)} snapshots in {snapshots} ({shown}) and no refs/main naming "
        "one; pass the snapshot folder itself"
    )


def _containing_root(folder: Path) -> Path:
    """Return the folder links may point into: the cached model for a hub snapshot, else the folder itself."""
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent
    return folder


def _inside(folder: Path, root: Path, name: str) -> Path:
    """Return ``folder/name`` after checking it does not lead out of ``root`` (links included)."""
    path = folder / name
    real = Path(os.path.realpath(path))
    if real != root and root not in real.parents:
        raise CheckpointError(
            f"{path}: is a link to {real}, outside the checkpoint folder {root}; kimi-viz reads no file "
            "outside it — copy the file into the folder"
        )
    return path


# --- what is in it -----------------------------------------------------------------------------------------------
def _architecture(config: Mapping[str, Any], source: str) -> tuple[str, FamilyFacts]:
    names = config.get("architectures")
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(f"architectures: missing from {source}; expected e.g. ['KimiK3ForConditionalGeneration']")
    for name in names:
        if name in FAMILIES:
            return name, FAMILIES[name]
    raise ConfigError(
        f"architectures: {names[0][:80]!r} in {source} is not a Kimi-K3 or Kimi-K2.5 model; expected one of "
        f"{', '.join(FAMILIES)}"
    )


def _placeholder(config: Mapping[str, Any], tokenizer: KimiTokenizer, facts: FamilyFacts, source: str) -> PlaceholderId:
    value = config.get("media_placeholder_token_id")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 31):
        raise ConfigError(f"media_placeholder_token_id: expected a token id, got {value!r:.40}; fix {source}")
    resolved = DEFAULT_PLACEHOLDER_ID if value is None else value
    column = 0 if facts.family == "kimi-k3" else 1
    sites = tuple(
        (release, f"config.json media_placeholder_token_id ({facts.processor}:{PLACEHOLDER_SITES[release][column]})")
        for release in RELEASES
    )
    return PlaceholderId(value, resolved, tokenizer.special_id(MEDIA_PAD), sites)


def _tokenizer(folder: Path, root: Path) -> tuple[KimiTokenizer, str]:
    config_path = _inside(folder, root, CONFIG_FILE)
    ranks_path = _inside(folder, root, RANKS_FILE)
    if not os.path.lexists(ranks_path):
        others = [f"{name} ({what})" for name, what in _OTHER_TOKENIZERS.items() if os.path.lexists(folder / name)]
        found = f"it holds {', '.join(others)}" if others else "it holds no tokenizer file"
        raise TokenizerError(
            f"{folder}: no {RANKS_FILE}; {found} — kimi-viz reads Kimi's TikTokenTokenizer (tiktoken.model) only"
        )
    if not os.path.lexists(config_path):
        raise TokenizerError(
            f"{folder}: no {CONFIG_FILE}; expected the file naming Kimi's TikTokenTokenizer and its special tokens"
        )
    tokenizer = read_tokenizer(ranks_path, config_path)
    return tokenizer, "TikTokenTokenizer"


def read_model_folder(path: str | os.PathLike, *, environ: Mapping[str, str] | None = None) -> ModelFolder:
    """Return the :class:`ModelFolder` of a checkpoint folder, or of a model id in the local hub cache (``environ``:
    the variables that locate it; the process's own by default). Nothing in the folder is executed."""
    asked = str(path)
    folder = Path(path).expanduser()
    if not folder.is_dir():
        if folder.exists():
            raise CheckpointError(f"--model-path {asked!r}: is a file; expected a checkpoint folder or a model id")
        folder = find_cached_model(asked, environ)
    root = Path(os.path.realpath(_containing_root(folder)))
    config_file = _inside(folder, root, "config.json")
    config, _vision = read_checkpoint_config(config_file)
    architecture, facts = _architecture(config, str(config_file))
    model_type = config.get("model_type")
    processor = load_preprocessor_config(_inside(folder, root, "preprocessor_config.json"))
    tokenizer, tokenizer_class = _tokenizer(folder, root)
    return ModelFolder(
        path=str(folder),
        asked=asked,
        architecture=architecture,
        model_type=model_type if isinstance(model_type, str) else "",
        facts=facts,
        placeholder=_placeholder(config, tokenizer, facts, str(config_file)),
        processor=processor,
        tokenizer=tokenizer,
        tokenizer_class=tokenizer_class,
    )


__all__ = [
    "Family",
    "FamilyFacts",
    "FAMILIES",
    "PlaceholderId",
    "ModelFolder",
    "hub_cache",
    "find_cached_model",
    "read_model_folder",
]
