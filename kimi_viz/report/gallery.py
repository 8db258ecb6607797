"""A gallery of the figures for a set of images: small PNGs plus one self-contained ``index.html``.

``write_gallery(out_dir)`` runs the processor on the sample photos (and the oversized 4200×3150
sample, whose 222×296 grid exceeds the patch budget) and writes: the batch overview, the row
spans, the row spans a consumer with another preset's limits would expect (first divergence
marked), every image on its patch grid with its first merged token highlighted, one image's
patches linked to their rows, and the checkpoint-vs-torch pixel difference of a resized image.
The HTML page links the PNGs by relative path and references nothing on the network.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ..data import SAMPLE_PHOTOS, images_dir, sample_path
from ..plots import (
    draw_grid_to_rows,
    draw_patch_grid,
    draw_pixel_diff,
    draw_processor_output,
    draw_row_spans,
)
from ..preprocess.layout import BatchLayout, compare_layouts
from ..preprocess.processor import Processor, resize_config
from ..preprocess.records import ProcessorOutput
from .text_table import Table

BIG_SAMPLE = "rocket_4200x3150.jpg"
OTHER_PRESET = {"kimi-k3": "kimi-k25", "kimi-k25": "kimi-k3"}
PNG_METADATA = {"Software": None}


@dataclass
class GalleryFigure:
    """One written figure: its file name, a title and a caption for the page."""

    file: str
    title: str
    caption: str


def default_images() -> list[Path]:
    """Return the gallery's default images: the sample photos, then the oversized sample when present."""
    paths = [sample_path(name) for name in SAMPLE_PHOTOS]
    if (images_dir() / BIG_SAMPLE).is_file():
        paths.append(sample_path(BIG_SAMPLE))
    return paths


def _slug(text: str) -> str:
    stem = Path(text).stem
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem) or "image"


def _resized_index(records: Sequence[Any]) -> int:
    """Return the index of the first image the processor resized (0 when none was)."""
    resized = (r.index for r in records if (r.resize.new_width, r.resize.new_height) != tuple(r.source_size))
    return next(resized, 0)


@dataclass
class _GalleryWriter:
    """Where a gallery's figures go and the figures written so far, in page order."""

    out: Path
    dpi: int
    figures: list[GalleryFigure] = field(default_factory=list)

    def add(self, ax: Axes, file: str, title: str, caption: str) -> None:
        """Save ``ax``'s figure as ``file`` and list it with its title and caption; returns nothing."""
        figure = cast(Figure, ax.figure)  # the draw_* functions, given no ax, draw on a Figure of their own
        figure.savefig(self.out / file, format="png", dpi=self.dpi, metadata=PNG_METADATA)
        self.figures.append(GalleryFigure(file, title, caption))


def _add_row_views(gallery: _GalleryWriter, output: ProcessorOutput, layout: BatchLayout, preset: str) -> None:
    """Add the batch overview, the row spans and, for a known preset, the rows a consumer with the other
    preset's limits would expect; returns nothing."""
    gallery.add(
        draw_processor_output(output),
        "batch.png",
        "The batch",
        f"{len(layout)} images under {preset}: each on its patch grid, above the packed pixel_values rows "
        f"({layout.total_rows} rows, {layout.total_tokens} merged tokens).",
    )
    gallery.add(
        draw_row_spans(layout),
        "row_spans.png",
        "Row spans",
        "Every image's rows [start, end) of pixel_values with its grid and patch count, and its merged tokens.",
    )
    other = OTHER_PRESET.get(preset)
    if other is not None:
        grids = [resize_config(*record.source_size, other).grid for record in output.records]
        produced = BatchLayout.from_grids(grids, labels=[s.label for s in layout.spans])
        comparison = compare_layouts(layout, produced)
        gallery.add(
            draw_row_spans(layout, produced=produced),
            "row_spans_vs_other_preset.png",
            f"{preset} rows against a {other} consumer",
            f"The rows a consumer running the {other} limits would produce for the same uploads. "
            + (comparison.message if not comparison.equal else "The two layouts agree for these images."),
        )


def _add_patch_grids(gallery: _GalleryWriter, output: ProcessorOutput, layout: BatchLayout) -> None:
    """Add every image on its patch grid, its first merged token's rows highlighted; returns nothing."""
    for span in layout.spans:
        first_token: Iterable[int] = layout.token_to_rows(span.token_span[0]) if span.num_tokens else []
        gallery.add(
            draw_patch_grid(output, span.index, highlight_rows=first_token),
            f"patch_grid_{span.index:02d}_{_slug(span.label)}.png",
            f"{span.label} on its patch grid",
            f"Grid {span.grid_text}, rows [{span.rows[0]}, {span.rows[1]}); the four rows of its first merged "
            f"token (token {span.token_span[0]}) are highlighted.",
        )


def _add_pixel_views(
    gallery: _GalleryWriter,
    output: ProcessorOutput,
    layout: BatchLayout,
    sources: Sequence[Any],
    checkpoint_processor: Processor,
    preset: str,
) -> None:
    """Add the first image's patches linked to their rows and the checkpoint-vs-torch pixel difference of the
    first resized image; returns nothing."""
    gallery.add(
        draw_grid_to_rows(output, layout, index=0),
        f"grid_to_rows_{_slug(layout.spans[0].label)}.png",
        f"{layout.spans[0].label}: patches to rows",
        "Chosen patches linked to their rows: row = start + y·w + x, images packed one after another.",
    )
    index = _resized_index(output.records)
    source = sources[index]
    checkpoint = checkpoint_processor.preprocess([source])
    torch_path = Processor(preset, backend="torch", device="cpu").preprocess([source])
    name = layout.spans[index].label
    gallery.add(
        draw_pixel_diff(checkpoint, torch_path),
        f"pixel_diff_{_slug(name)}.png",
        f"{name}: checkpoint vs torch pixels",
        "Per-patch max |difference| between the checkpoint (CPU, PIL) path and SGLang's torch path.",
    )


def write_gallery(
    out_dir: str | Path, images: Sequence[Any] | None = None, *, preset: str = "kimi-k3", dpi: int = 80
) -> list[Path]:
    """Write the figures for ``images`` (default: the sample images) and ``index.html`` into ``out_dir``.

    Returns the written paths: the PNGs in page order, then ``index.html``.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sources = list(images) if images is not None else default_images()
    checkpoint_processor = Processor(preset, backend="checkpoint")
    output = checkpoint_processor.preprocess(sources)
    layout = BatchLayout.from_output(output)
    gallery = _GalleryWriter(out, dpi)
    _add_row_views(gallery, output, layout, preset)
    _add_patch_grids(gallery, output, layout)
    if len(layout):
        _add_pixel_views(gallery, output, layout, sources, checkpoint_processor, preset)
    page = out / "index.html"
    page.write_text(_html(gallery.figures, preset, layout), encoding="utf-8")
    return [out / f.file for f in gallery.figures] + [page]


def _html(figures: Sequence[GalleryFigure], preset: str, layout: BatchLayout) -> str:
    """Return the gallery page: inline CSS, relative image links, nothing fetched from a network."""
    items = "\n".join(
        f'<figure id="{html.escape(Path(f.file).stem)}">\n'
        f"  <h2>{html.escape(f.title)}</h2>\n"
        f'  <a href="{html.escape(f.file)}"><img src="{html.escape(f.file)}" alt="{html.escape(f.title)}"></a>\n'
        f"  <figcaption>{html.escape(f.caption)}</figcaption>\n"
        f"</figure>"
        for f in figures
    )
    table = Table(
        ["#", "image", "grid t×h×w", "rows", "patches", "tokens"],
        [
            (
                s.number,
                s.label,
                s.grid_text,
                f"[{s.rows[0]}, {s.rows[1]})",
                s.patches,
                f"[{s.token_span[0]}, {s.token_span[1]})",
            )
            for s in layout.spans
        ],
    )._repr_html_()
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>kimi-viz gallery ({html.escape(preset)})</title>
<style>
body {{ font-family: sans-serif; margin: 2em auto; max-width: 1000px; color: #111; }}
figure {{ margin: 2em 0; }}
img {{ max-width: 100%; border: 1px solid #ccc; }}
figcaption {{ color: #333; font-size: 0.95em; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
td, th {{ border: 1px solid #bbb; padding: 0.2em 0.6em; text-align: right; }}
</style>
</head>
<body>
<h1>kimi-viz gallery: {len(layout)} images under {html.escape(preset)}</h1>
<p>{layout.total_rows} rows of pixel_values, {layout.total_tokens} merged tokens.</p>
{table}
{items}
</body>
</html>
"""
