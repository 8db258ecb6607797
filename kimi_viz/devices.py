"""Device selection shared by the torch pixel path, the encoder and the replay."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias, get_args

from .errors import DeviceError

if TYPE_CHECKING:  # pragma: no cover
    import torch

DeviceChoice = Literal["auto", "cpu", "cuda"]  # what a command-line --device takes
DEVICES: tuple[DeviceChoice, ...] = get_args(DeviceChoice)
#: What every ``device=`` parameter of the kit takes: ``"auto"``, ``"cpu"``, ``"cuda"``, ``"cuda:1"`` or a torch device.
DeviceLike: TypeAlias = "str | torch.device"


def resolve_device(device: DeviceLike | None = "auto") -> torch.device:
    """Return the torch device for ``"auto"`` (CUDA when available, else CPU), ``"cpu"`` or ``"cuda[:i]"``."""
    import torch

    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise DeviceError(f"device {device!r} is not a device name; expected auto, cpu or cuda") from exc
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise DeviceError(
            f"device {str(device)!r} was asked for but CUDA is not available (torch {torch.__version__}); "
            "use device 'cpu' or 'auto'"
        )
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise DeviceError(
            f"device {str(device)!r} was asked for but this machine has {count} CUDA device(s); "
            f"use cuda:0 to cuda:{count - 1}, 'cuda' or 'auto'"
        )
    return resolved
