"""Writing output files without following links: every report, trace, figure and manifest the kit writes.

An output folder may sit inside a folder someone else sent (a captured manifest): a ``report.html``
there that is a symbolic link to ``~/.bashrc``, or an output folder that is itself a link, must
never be written through. :func:`prepare_folder` creates (or accepts) the folder and refuses a
folder that is a link, a file, or lies under a file; :func:`write_file` writes one file into it by
creating a new file next to the target (no link followed, opened relative to the folder) and
renaming it over the target, so an existing link is replaced, never written through.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import OutputError


def file_kind(mode: int, *, fifo: str = "named pipe") -> str:
    """Return what a path that is not a regular file is, from its ``st_mode``: ``"a folder"``, ``"a FIFO (…)"``
    (with ``fifo`` as the note in brackets), ``"a socket"``, ``"a device"`` or ``"not a regular file"``."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return f"a FIFO ({fifo})"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def check_folder(path: str | os.PathLike, *, what: str = "--out") -> Path:
    """Raise OutputError when ``path`` is a link, a file or lies under a file (nothing is created); return it.

    Commands call it first, so a bad output path is refused before any work is done.
    """
    folder = Path(path)
    for parent in [folder, *folder.parents]:
        if parent.is_symlink():
            if parent == folder:
                raise OutputError(
                    f"{what} {str(folder)!r}: is a symbolic link; kimi-viz never writes through links — "
                    "choose a real folder"
                )
            break  # links above the chosen folder (e.g. /tmp -> /private/tmp) are the user's own
        if parent.exists() and not parent.is_dir():
            raise OutputError(
                f"{what} {str(folder)!r}: {'is' if parent == folder else 'lies under'} the file "
                f"{str(parent)!r}; expected a folder — choose another path"
            )
        if parent.exists():
            break
    return folder


def prepare_folder(path: str | os.PathLike, *, what: str = "--out") -> Path:
    """Return ``path`` as an existing folder to write into, creating it; raise OutputError for links and files."""
    folder = check_folder(path, what=what)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(
            f"{what} {str(folder)!r}: cannot create the folder ({exc.strerror or exc}); choose a writable path"
        ) from None
    if folder.is_symlink() or not folder.is_dir():
        raise OutputError(f"{what} {str(folder)!r}: expected a real folder, not a link or a file")
    return folder


def write_file(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` inside an existing real folder without following links; return the path.

    The bytes go to a new file created in the folder (``O_CREAT | O_EXCL | O_NOFOLLOW``, relative to
    the folder opened with ``O_NOFOLLOW``), which is then renamed over ``path``: a link at ``path`` is
    replaced by the file, and nothing outside the folder is touched.
    """
    target = Path(path)
    folder = target.parent
    flags_dir = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
    try:
        dir_fd = os.open(folder, flags_dir)
    except OSError as exc:
        raise OutputError(
            f"{str(folder)!r}: cannot open the output folder without following links "
            f"({exc.strerror or exc}); choose a real folder"
        ) from None
    temp = f".{target.name}.{os.urandom(6).hex()}.tmp"
    try:
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644, dir_fd=dir_fd)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            os.close(fd)
        if os.path.isdir(os.path.join(folder, target.name)) and not os.path.islink(os.path.join(folder, target.name)):
            os.unlink(temp, dir_fd=dir_fd)
            raise OutputError(
                f"{str(target)!r}: is a folder; expected a file name to write — remove it or choose another --out"
            )
        os.replace(temp, target.name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OutputError:
        raise
    except OSError as exc:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        raise OutputError(f"{str(target)!r}: cannot write ({exc.strerror or exc}); choose a writable --out") from None
    finally:
        os.close(dir_fd)
    return target


def check_output(path: str | os.PathLike, *, what: str = "--out") -> Path:
    """Check an output that is a folder, or a ``.zip`` file (whose folder is checked): see :func:`check_folder`."""
    target = Path(path)
    if target.suffix.lower() == ".zip":
        if target.is_dir() and not target.is_symlink():
            raise OutputError(f"{what} {str(target)!r}: is a folder; expected the name of a .zip file to write")
        check_folder(target.parent, what=what)
        return target
    return check_folder(target, what=what)


__all__ = ["file_kind", "check_folder", "check_output", "prepare_folder", "write_file"]
