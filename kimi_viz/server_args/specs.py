"""The records of the server-argument table: how one release parses a dest, and what the kit does with it.

:class:`ArgSpec` is one dest as one release's parser declares it (enough to rebuild an equivalent
``argparse`` parser); :class:`OptionForm` is how one spelling of it parses, where that differs from the
dest's main action; :class:`ReleaseArgs` is a release's whole table; :class:`Classification` and
:class:`EnvVar` hold the kit's own classification (``data/handling.toml``).
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

from .._records import frozen
from ..errors import ConfigError


class Handling(str, Enum):
    """What the kit does with a server argument or an environment variable."""

    MODELLED = "modelled"  # the kit replays it (``sets`` names the setting it feeds)
    INERT = "inert"  # changes nothing the kit replays
    NOT_MODELLED = "not-modelled"  # not modelled, and may change the answer


# argparse's own kinds, and SGLang's DeprecatedAction as the two things it does: "noop" (accepted, SGLang
# only logs that it is deprecated) and "error" (the parser refuses it, naming the replacement).
ActionKind = Literal["store", "store_true", "store_false", "store_const", "append", "count", "noop", "error"]
ACTION_KINDS: tuple[ActionKind, ...] = (
    "store",
    "store_true",
    "store_false",
    "store_const",
    "append",
    "count",
    "noop",
    "error",
)
Choice = str | int

#: The deployment facts a ``deployment.*`` setting may name (the attention-TP size, the platform, the checkpoint).
DEPLOYMENT_FIELDS = (
    "tp_size",
    "dp_size",
    "enable_dp_attention",
    "attn_dp_size",
    "attn_cp_size",
    "model_path",
    "tokenizer_path",
    "context_length",
)
SETTING_PREFIXES = ("load.", "settings.", "deployment.")


@frozen
class OptionForm:
    """How some spellings of a dest parse: its action, arity, type, choices and the constant it stores.

    A ``store_const`` whose ``nargs`` is None takes one value (checked against ``choices``) and stores ``const``.
    """

    options: tuple[str, ...]
    action: ActionKind
    nargs: str | int | None
    value_type: str | None
    choices: tuple[Choice, ...] | None
    const: object = None


@frozen
class ArgSpec:
    """One server argument as ONE release's parser declares it."""

    dest: str
    options: tuple[str, ...]  # every spelling the release accepts for this dest, the main one first
    deprecated: tuple[str, ...]  # those of ``options`` the release marks deprecated (SGLang's Deprecated* actions)
    action: ActionKind  # the main action's (the first not marked deprecated)
    nargs: str | int | None
    value_type: str | None  # the parser's type name: "int", "float", "str", "human_readable_int", "loads", ...
    choices: tuple[Choice, ...] | None
    default: object  # JSON value the server takes when the flag is absent (a list default stays a list)
    const: object = None
    variants: tuple[OptionForm, ...] = ()  # spellings that parse unlike the main action (``--no-x``, an old alias)
    required: bool = False  # the parser refuses a command without it (``--model-path``)

    def form(self, option: str) -> OptionForm:
        """Return how ``option`` (one of :attr:`options`) parses: its variant's form, else the main action's."""
        for variant in self.variants:
            if option in variant.options:
                return variant
        if option not in self.options:
            raise ConfigError(f"{option!r} is no spelling of {self.dest}: expected one of {', '.join(self.options)}")
        main = tuple(o for o in self.options if not any(o in v.options for v in self.variants))
        return OptionForm(main, self.action, self.nargs, self.value_type, self.choices, self.const)

    def to_json(self) -> dict[str, object]:
        """Return the spec as ``tests/parity/server_args_probe.py`` prints one (lists, every key present)."""
        return {
            "options": list(self.options),
            "deprecated": list(self.deprecated),
            **_form_json(self.action, self.nargs, self.value_type, self.choices, self.const),
            "variants": [
                {"options": list(v.options), **_form_json(v.action, v.nargs, v.value_type, v.choices, v.const)}
                for v in self.variants
            ],
            "default": self.default,
            "required": self.required,
        }


def _form_json(
    action: str, nargs: object, value_type: str | None, choices: tuple[Choice, ...] | None, const: object
) -> dict[str, object]:
    return {
        "action": action,
        "nargs": nargs,
        "type": value_type,
        "choices": None if choices is None else list(choices),
        "const": const,
    }


@frozen
class ReleaseArgs:
    """One release's table: every dest's spec, and every spelling's."""

    release: str
    by_dest: dict[str, ArgSpec]
    by_option: dict[str, ArgSpec]  # every spelling -> its spec


@frozen
class Classification:
    """The kit's classification of some dests (one ``[[arg]]`` entry of ``data/handling.toml``)."""

    dests: tuple[str, ...]
    handling: Handling
    effect: str  # one line, true of each dest
    sets: str | None  # modelled: "load.page_size", "settings.transport", "deployment.tp_size", ...


@frozen
class EnvVar:
    """An environment variable a launch command may carry, and what the kit does with it."""

    name: str  # a name ending in "*" stands for every variable with that prefix ("NCCL_*")
    handling: Handling
    effect: str
    sets: str | None
    releases: tuple[str, ...]  # the releases that read it, oldest first
    default: object  # what those releases take when it is unset (None: no default of theirs)
