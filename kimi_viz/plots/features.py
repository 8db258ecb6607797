"""Figures of encoder features: a PCA colour map per image and per-token norms along the batch.

:func:`draw_feature_map` projects one image's token features onto their first three principal
components and shows them as R, G, B on the image's token grid (``h/2 × w/2``), over the image.
:func:`draw_token_norms` draws the L2 norm of every feature row along the packed token sequence,
with each image's span shaded and labelled.

Artists carry ``gid`` values so code (and tests) can find them: ``"feature-map-image"``,
``"feature-map-pca"``, ``"token-norms-lines"``, ``"token-norms-spans"`` and ``"token-norms-label-<i>"``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection, PolyCollection

from ..errors import ArgumentError, LayoutLookupError, RowCountError
from .axes import sized_axes
from .palette import TEXT_COLOR, color_for, edge_style_for, hatch_for

EXACT_PCA_MAX = 512  # up to this many rows or columns the SVD is exact; above, a seeded randomised one


def _to_numpy(values: Any) -> np.ndarray:
    if hasattr(values, "detach"):
        values = values.detach().float().cpu().numpy()
    return np.asarray(values, dtype=np.float64)


def _leading_svd(x: np.ndarray, k: int, power_iterations: int = 6) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Return ``(u, s, vt)`` of the ``k`` leading singular triplets of ``x``: an exact SVD for small
    inputs, else a randomised range finder with power iterations (seed 0, so figures are
    reproducible) that costs ``O(n·C·k)`` instead of ``O(min(n, C)²·max(n, C))``."""
    if min(x.shape) <= EXACT_PCA_MAX:
        u, s, vt = np.linalg.svd(x, full_matrices=False)
        return u[:, :k], s[:k], vt[:k]
    probe = np.random.default_rng(0).standard_normal((x.shape[1], k + 8))
    basis = np.linalg.qr(x @ probe)[0]
    for _ in range(power_iterations):
        basis = np.linalg.qr(x @ np.linalg.qr(x.T @ basis)[0])[0]
    u, s, vt = np.linalg.svd(basis.T @ x, full_matrices=False)
    return (basis @ u)[:, :k], s[:k], vt[:k]


def pca_colors(features: Any, components: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(colours [n, 3] in 0..1, explained variance ratio [3])`` of the first principal
    components of ``features`` ``[n, C]`` (each component scaled by its 1st–99th percentiles;
    components beyond the data's rank are 0)."""
    x = _to_numpy(features)
    x = x - x.mean(axis=0, keepdims=True)
    colors = np.zeros((x.shape[0], components))
    ratio = np.zeros(components)
    if x.shape[0] < 2 or not np.any(x):
        return colors, ratio
    u, s, vt = _leading_svd(x, min(components, *x.shape))
    k = s.shape[0]
    scores = u * s
    for c in range(k):  # fix each component's sign so the result does not depend on the SVD's choice
        if vt[c, np.argmax(np.abs(vt[c]))] < 0:
            scores[:, c] = -scores[:, c]
    low, high = np.percentile(scores, 1, axis=0), np.percentile(scores, 99, axis=0)
    colors[:, :k] = np.clip((scores - low) / np.where(high > low, high - low, 1.0), 0.0, 1.0)
    ratio[:k] = s**2 / np.vdot(x, x)  # ‖x‖² = Σ of all squared singular values
    return colors, ratio


def _check_index(index: int, count: int, what: str) -> None:
    """Raise LayoutLookupError unless ``0 <= index < count``."""
    if not 0 <= index < count:
        raise LayoutLookupError(f"image index {index} is outside {what}'s {count} images; pass 0..{count - 1}")


def _feature_source(
    output_or_features: Any, record_or_grid: Any, index: int
) -> tuple[np.ndarray, tuple[int, int, int], Any]:
    """Return (this image's feature rows, its grid (t, h, w), its record or None)."""
    record = None
    if hasattr(record_or_grid, "records"):  # a ProcessorOutput
        _check_index(index, len(record_or_grid.records), "the processor output")
        record = record_or_grid.records[index]
    elif hasattr(record_or_grid, "grid_thw"):  # an ImageRecord
        record = record_or_grid
    if hasattr(output_or_features, "token_spans"):  # an EncoderOutput
        _check_index(index, len(output_or_features.token_spans), "the encoder output")
        start, end = output_or_features.token_spans[index]
        features = output_or_features.features[start:end]
        grid = tuple(int(v) for v in output_or_features.grid_thws[index].tolist())
    else:
        features = _to_numpy(output_or_features)
        if record is not None:
            grid = tuple(record.grid_thw)
            start, end = record.token_span
            if features.shape[0] != end - start and features.shape[0] >= end:
                features = features[start:end]  # batch features: take this image's span
        elif record_or_grid is not None:
            try:
                grid = tuple(int(v) for v in record_or_grid)
            except (TypeError, ValueError):
                grid = ()
            grid = grid if len(grid) != 2 else (1, *grid)
            if len(grid) != 3 or min(grid) < 1:
                raise RowCountError(
                    f"grid {record_or_grid!r} is not (t, h, w) or (h, w) of positive integers; "
                    "pass the image's grid_thw"
                )
        else:
            raise RowCountError(
                "draw_feature_map needs the image's grid: pass an EncoderOutput, or features "
                "with an ImageRecord or a (t, h, w) grid"
            )
    features = _to_numpy(features)
    t, h, w = grid
    if features.ndim != 2:
        raise RowCountError(
            f"features of image {index} have shape {tuple(features.shape)}; expected [tokens, width] feature rows"
        )
    if features.shape[0] != (h // 2) * (w // 2):
        raise RowCountError(
            f"image {index} has grid {t}×{h}×{w} ({(h // 2) * (w // 2)} tokens) but "
            f"{features.shape[0]} feature rows were given; pass that image's rows"
        )
    return features, (t, h, w), record


def draw_feature_map(
    output_or_features: Any,
    record_or_grid: Any = None,
    *,
    index: int = 0,
    image: Any = None,
    ax: Axes | None = None,
    alpha: float = 0.65,
) -> Axes:
    """Return Axes showing the first three PCA components of image ``index``'s token features as
    R, G, B on its ``h/2 × w/2`` token grid, over the image (``image``, else the record's padded
    resized image) stretched to that grid. Without an image the colours are drawn opaque."""
    features, (t, h, w), record = _feature_source(output_or_features, record_or_grid, index)
    rows, cols = h // 2, w // 2
    colors, ratio = pca_colors(features)
    ax = sized_axes(ax, (max(4.5, min(9.0, cols / 4)), max(3.5, min(9.0, rows / 4 + 1))))
    extent = (0, cols, rows, 0)
    picture = image if image is not None else getattr(record, "resized", None)
    if picture is not None:
        picture = np.asarray(picture)
        ax.imshow(
            picture,
            extent=extent,
            interpolation="bilinear",
            gid="feature-map-image",
            cmap="gray" if picture.ndim == 2 else None,
        )
    ax.imshow(
        colors.reshape(rows, cols, 3),
        extent=extent,
        interpolation="nearest",
        alpha=alpha if picture is not None else 1.0,
        gid="feature-map-pca",
    )
    ax.set_xlim(0, cols)
    ax.set_ylim(rows, 0)
    ax.set_xlabel("token column (one token = 2×2 patches = 28×28 px)")
    ax.set_ylabel("token row")
    ax.set_title(
        f"image {index}: grid {t}×{h}×{w} → {rows}×{cols} tokens\n"
        f"R, G, B = PCA 1, 2, 3 ({ratio[0]:.0%}, {ratio[1]:.0%}, {ratio[2]:.0%} of variance)",
        fontsize="medium",
    )
    return ax


def _token_norms(encoder_output: Any, source: str) -> np.ndarray:
    """Return the L2 norm of every token's ``source`` row (output features or merged projector input)."""
    if source not in ("features", "merged"):
        raise ArgumentError(f"source: expected 'features' or 'merged', got {source!r}")
    values = encoder_output.features if source == "features" else encoder_output.merged
    if values is None:
        raise ArgumentError(
            "source='merged' needs an EncoderOutput made with return_intermediates=True; encode again with it"
        )
    features = _to_numpy(values).reshape(values.shape[0], -1)
    return np.linalg.norm(features, axis=1)


def _draw_span_shading(ax: Axes, spans: list[tuple[int, int]]) -> None:
    """Shade each image's token span in its colour, hatching every other one; returns nothing."""
    shade = PolyCollection(
        [[(start, 0), (end, 0), (end, 1), (start, 1)] for start, end in spans],
        transform=ax.get_xaxis_transform(),
        facecolors=[color_for(i) for i in range(len(spans))],
        alpha=0.18,
        linewidths=0,
        gid="token-norms-spans",
    )
    ax.add_collection(shade)
    hatched = [i for i in range(len(spans)) if hatch_for(i)]
    if hatched:
        ax.add_collection(
            PolyCollection(
                [[(spans[i][0], 0), (spans[i][1], 0), (spans[i][1], 1), (spans[i][0], 1)] for i in hatched],
                transform=ax.get_xaxis_transform(),
                facecolors="none",
                edgecolors="#999999",
                hatch=hatch_for(1),
                linewidths=0,
                gid="token-norms-hatch",
            )
        )


def _draw_norm_lines(ax: Axes, spans: list[tuple[int, int]], norms: np.ndarray) -> None:
    """Draw one line of token norms per image span (a one-token span as a flat step); returns nothing."""
    lines = []
    for start, end in spans:
        x = np.arange(start, end) + 0.5
        lines.append(
            np.column_stack([x, norms[start:end]])
            if end - start > 1
            else np.array([[start, norms[start]], [end, norms[start]]])
        )
    ax.add_collection(
        LineCollection(
            lines,
            colors=TEXT_COLOR,
            linestyles=[edge_style_for(i) for i in range(len(lines))],
            linewidths=1.0,
            gid="token-norms-lines",
        )
    )


def _draw_span_labels(ax: Axes, spans: list[tuple[int, int]], grids: list[list[int]], total: int) -> None:
    """Label each span wide enough with its image index and token grid; returns nothing."""
    for i, ((start, end), (_, h, w)) in enumerate(zip(spans, grids)):
        if (end - start) / total < 0.04 and len(spans) > 1:
            continue  # too narrow to hold a label; its shading still marks it
        ax.text(
            (start + end) / 2,
            0.98,
            f"image {i}\n{h // 2}×{w // 2} tokens",
            transform=ax.get_xaxis_transform(),
            ha="center",
            va="top",
            fontsize="small",
            color=TEXT_COLOR,
            gid=f"token-norms-label-{i}",
        )


def draw_token_norms(encoder_output: Any, *, ax: Axes | None = None, source: str = "features") -> Axes:
    """Return Axes with the L2 norm of every token along the packed token sequence; each image's
    span is shaded (alternating colour and hatch) and labelled with its index and token grid.

    ``source="features"`` plots the output rows; ``"merged"`` the projector's input (the four
    merged patches of each token, needs ``return_intermediates=True``) — useful when the output
    norms are flat, as they are after the K3 post-norm with unit weights.
    """
    norms = _token_norms(encoder_output, source)
    spans = [tuple(s) for s in encoder_output.token_spans]
    grids = encoder_output.grid_thws.tolist()
    ax = sized_axes(ax, (9.0, 3.6))
    total = max(len(norms), 1)
    low, high = (float(norms.min()), float(norms.max())) if len(norms) else (0.0, 1.0)
    pad = max(high - low, 0.05 * max(abs(high), 1e-6))
    bottom, top = max(0.0, low - 0.1 * pad), high + 0.6 * pad  # room above the data for the labels
    _draw_span_shading(ax, spans)
    _draw_norm_lines(ax, spans, norms)
    _draw_span_labels(ax, spans, grids, total)
    ax.set_xlim(0, total)
    ax.set_ylim(bottom, top)
    ax.set_xlabel("merged token (feature row; one per <|media_pad|>)")
    what = "feature row" if source == "features" else "merged input"
    ax.set_ylabel(f"L2 norm of the {what}")
    ax.set_title(f"{source} norms: {len(norms)} tokens from {len(spans)} image(s)", fontsize="medium")
    return ax
