"""Step through a replay: a live ipywidgets control in Jupyter, a self-contained HTML page everywhere else.

``Stepper(trace)`` shows one rank of a :class:`~kimi_viz.deferred.Trace` (the first failing rank
by default) one step at a time: the :func:`~kimi_viz.plots.steps.draw_step` figure and a counts
table (expected and produced rows, the check, the error). In a notebook with a kernel it is a
widget (slider, previous / next, play); its mime bundle also carries :meth:`Stepper.to_html`, a
static stepper with inline CSS and JavaScript and the frames embedded as PNG data URIs, so
exported notebooks and reports step through without a kernel or a network.

Stable hooks for browser tests, in both forms: ``.kv-stepper`` (root), ``input.kv-slider``,
``button.kv-prev``, ``button.kv-next``, ``button.kv-play``, ``.kv-counts`` (the table),
``.kv-frame`` (the figure) and ``.kv-title``.
"""

from __future__ import annotations

import base64
import html
import io
import itertools
import json
import math
from typing import TYPE_CHECKING, Any

from .errors import ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from .deferred import RankTrace, Trace

PNG_METADATA = {"Software": None}
_ids = itertools.count(1)

CSS = """
.kv-stepper { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; color: #111;
  border: 1px solid #bbb; border-radius: 6px; padding: 10px 12px; margin: 10px 0; max-width: 1100px; }
.kv-stepper .kv-controls { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; }
.kv-stepper button { font: inherit; padding: 3px 10px; border: 1px solid #666; border-radius: 4px;
  background: #f4f4f4; cursor: pointer; }
.kv-stepper button:focus-visible, .kv-stepper input:focus-visible { outline: 2px solid #0072B2; }
.kv-stepper input.kv-slider { flex: 1 1 260px; }
.kv-stepper .kv-title { font-weight: 600; margin: 8px 0 4px; }
.kv-stepper table.kv-counts { border-collapse: collapse; margin: 4px 0 8px; }
.kv-stepper table.kv-counts th, .kv-stepper table.kv-counts td { border: 1px solid #ccc; padding: 2px 8px;
  text-align: left; font-variant-numeric: tabular-nums; }
.kv-stepper table.kv-counts th { background: #f0f0f0; font-weight: 600; }
.kv-stepper .kv-fail { color: #B34000; font-weight: 600; }
.kv-stepper .kv-pass { color: #006B4F; }
.kv-stepper img.kv-frame { max-width: 100%; height: auto; display: block; }
"""

JS = """
(function () {
  var root = document.getElementById(%(root)s);
  if (!root) { return; }
  var data = JSON.parse(root.querySelector("script.kv-data").textContent);
  var slider = root.querySelector("input.kv-slider");
  var frame = root.querySelector("img.kv-frame");
  var table = root.querySelector("table.kv-counts");
  var title = root.querySelector(".kv-title");
  var position = root.querySelector(".kv-position");
  var play = root.querySelector("button.kv-play");
  var timer = null;
  function esc(text) {
    return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }
  function show(k) {
    k = Math.max(0, Math.min(data.frames.length - 1, k));
    slider.value = k;
    frame.src = data.frames[k];
    var c = data.counts[k];
    frame.alt = "step " + (k + 1) + ": " + c.title;
    title.textContent = "Step " + (k + 1) + " of " + data.frames.length + " \\u00b7 " + c.spec_ref + " " + c.title;
    position.textContent = (k + 1) + " / " + data.frames.length;
    var rows = "";
    for (var i = 0; i < data.columns.length; i++) {
      var key = data.columns[i][0];
      var value = c[key] === null || c[key] === undefined ? "\\u2014" : c[key];
      var css = key === "check" ? (value === "FAIL" ? "kv-fail" : (value === "PASS" ? "kv-pass" : "")) :
                (key === "error" && c[key] ? "kv-fail" : "");
      rows += "<tr><th scope=\\"row\\">" + esc(data.columns[i][1]) + "</th><td class=\\"" + css +
              "\\" data-key=\\"" + key + "\\">" + esc(value) + "</td></tr>";
    }
    table.innerHTML = rows;
  }
  function stop() { if (timer !== null) { clearInterval(timer); timer = null; play.textContent = "\\u25b6 Play"; } }
  slider.addEventListener("input", function () { stop(); show(parseInt(slider.value, 10)); });
  root.querySelector("button.kv-prev").addEventListener("click", function () { stop(); show(parseInt(slider.value, 10) - 1); });
  root.querySelector("button.kv-next").addEventListener("click", function () { stop(); show(parseInt(slider.value, 10) + 1); });
  play.addEventListener("click", function () {
    if (timer !== null) { stop(); return; }
    play.textContent = "\\u23f8 Pause";
    if (parseInt(slider.value, 10) >= data.frames.length - 1) { show(0); }
    timer = setInterval(function () {
      var k = parseInt(slider.value, 10) + 1;
      if (k >= data.frames.length) { stop(); return; }
      show(k);
    }, 1200);
  });
  root.addEventListener("keydown", function (event) {
    if (event.key === "ArrowRight") { stop(); show(parseInt(slider.value, 10) + 1); }
    if (event.key === "ArrowLeft") { stop(); show(parseInt(slider.value, 10) - 1); }
  });
  show(0);
})();
"""

COLUMNS = (
    ("position", "step"),
    ("name", "name"),
    ("images", "images on this rank"),
    ("expected_rows", "rows the grids expect"),
    ("produced_rows", "rows produced so far"),
    ("check", "check"),
    ("check_detail", "compared"),
    ("error", "SGLang raises"),
)


def _counts_table(counts: dict[str, Any], *, th_style: str = "") -> str:
    """Return a :meth:`Stepper.counts` dict as ``table.kv-counts`` markup.

    The cells (values, ``data-key`` and the ``kv-pass`` / ``kv-fail`` classes) are the ones the static
    page's script writes, so the widget and the static page show the same table. ``th_style`` is an
    optional inline style for the row headers.
    """
    rows = []
    for key, label in COLUMNS:
        value = counts[key]
        css = ""
        if key == "check" and value in ("PASS", "FAIL"):
            css = "kv-pass" if value == "PASS" else "kv-fail"
        elif key == "error" and value:
            css = "kv-fail"
        text = "—" if value is None else str(value)
        style = f' style="{th_style}"' if th_style else ""
        rows.append(f'<tr><th scope="row"{style}>{html.escape(label)}</th><td class="{css}" data-key="{key}">'
                    f"{html.escape(text)}</td></tr>")
    return f'<table class="kv-counts">{"".join(rows)}</table>'


def _json_for_script(value: Any) -> str:
    """Return JSON safe to put inside a ``<script>`` element."""
    return json.dumps(value, separators=(",", ":")).replace("</", "<\\/").replace("<!--", "<\\!--")


class Stepper:
    """Step through one rank of a replay; a widget in Jupyter, static HTML elsewhere."""

    def __init__(self, trace: "Trace", *, rank: int | None = None, dpi: int = 80):
        from .plots.steps import resolve_rank

        self.trace = trace
        self.rank: "RankTrace" = resolve_rank(trace, rank)
        self.dpi = int(dpi)
        self._frames: list[bytes | None] = [None] * len(self.rank.steps)
        self._widget = None

    def __len__(self) -> int:
        return len(self.rank.steps)

    def __repr__(self) -> str:
        return (f"Stepper(rank {self.rank.rank} of TP {self.trace.tp_size}, {len(self)} steps, "
                f"{self.trace.outcome})")

    # --- data -----------------------------------------------------------------------------------
    def _check_index(self, k: int) -> int:
        n = len(self)
        if isinstance(k, bool) or not isinstance(k, int) or not -n <= k < n:
            raise ConfigError(f"step {k!r} does not exist; this stepper has steps 0..{n - 1} (or -{n}..-1)")
        return k % n

    def frame(self, k: int) -> bytes:
        """Return the PNG bytes of step ``k``'s figure (drawn once, then cached)."""
        k = self._check_index(k)
        if self._frames[k] is None:
            from .plots.steps import draw_step

            ax = draw_step(self.trace, k, rank=self.rank.rank)
            buffer = io.BytesIO()
            ax.figure.savefig(buffer, format="png", dpi=self.dpi, metadata=PNG_METADATA)
            self._frames[k] = buffer.getvalue()
        return self._frames[k]  # type: ignore[return-value]

    def frames(self) -> list[bytes]:
        """Return the PNG bytes of every step, in order."""
        return [self.frame(k) for k in range(len(self))]

    def counts(self, k: int) -> dict[str, Any]:
        """Return the counts shown beside step ``k``: images, expected and produced rows, the check and error."""
        k = self._check_index(k)
        step = self.rank.steps[k]
        rows = step.variables.get("row_tracks")
        if rows is None:
            grids = self.trace.grid_thws_host or []
            images = len(self.trace.batch.items)
            expected = sum(math.prod(g) for g in grids) if grids else None
            produced = None
        else:
            images = len(rows)
            expected = sum(math.prod(int(v) for v in r["expected_grid"]) for r in rows)
            known = [r["produced_rows"] for r in rows if r["produced_rows"] is not None]
            produced = sum(known) if known else None
        check = step.check
        detail = None
        if check is not None and not isinstance(check.get("expected"), (list, dict)):
            detail = f"expected {check['expected']}, actual {check['actual']}"
        elif check is not None:
            detail = check["name"]
        return {
            "step": k,
            "position": f"{k + 1} of {len(self)}",
            "name": step.name,
            "title": step.title,
            "spec_ref": step.spec_ref,
            "images": images,
            "expected_rows": expected,
            "produced_rows": produced,
            "check": None if check is None else ("PASS" if check["passed"] else "FAIL"),
            "check_detail": detail,
            "error": None if step.error is None else f"{step.error.type}: {step.error.message}",
        }

    # --- static HTML ------------------------------------------------------------------------------
    def to_html(self) -> str:
        """Return a self-contained static stepper: inline CSS and JS, PNG frames as data URIs, no network."""
        root = f"kv-stepper-{next(_ids)}"
        frames = ["data:image/png;base64," + base64.b64encode(png).decode("ascii") for png in self.frames()]
        counts = [self.counts(k) for k in range(len(self))]
        data = {"frames": frames, "counts": counts, "columns": [list(c) for c in COLUMNS],
                "rank": self.rank.rank, "tp_size": self.trace.tp_size, "variant": self.trace.variant}
        first = counts[0]
        outcome = ("ok" if self.rank.error is None else f"{self.rank.error.type}: {self.rank.error.message}")
        heading = (f"Rank {self.rank.rank} of attention-TP {self.trace.tp_size} ({self.trace.variant} code): "
                   f"{outcome}")
        n = len(self)
        return (
            f'<div class="kv-stepper" id="{root}" data-steps="{n}" data-rank="{self.rank.rank}" tabindex="0">\n'
            f"<style>{CSS}</style>\n"
            f'<div class="kv-heading">{html.escape(heading)}</div>\n'
            '<div class="kv-controls">'
            '<button type="button" class="kv-prev" aria-label="previous step">&#9664; Previous</button>'
            f'<input type="range" class="kv-slider" min="0" max="{n - 1}" step="1" value="0" '
            'aria-label="step">'
            '<button type="button" class="kv-next" aria-label="next step">Next &#9654;</button>'
            '<button type="button" class="kv-play" aria-label="play the steps">&#9654; Play</button>'
            f'<span class="kv-position">1 / {n}</span></div>\n'
            f'<div class="kv-title">Step 1 of {n} · {html.escape(first["spec_ref"])} {html.escape(first["title"])}</div>\n'
            f"{_counts_table(first)}\n"
            f'<img class="kv-frame" src="{frames[0]}" alt="step 1: {html.escape(first["title"])}">\n'
            f'<script type="application/json" class="kv-data">{_json_for_script(data)}</script>\n'
            f"<script>{JS % {'root': json.dumps(root)}}</script>\n"
            "</div>"
        )

    # --- live widget ------------------------------------------------------------------------------
    def counts_html(self, k: int) -> str:
        """Return the counts of step ``k`` as an HTML table: the widget's counts panel, the static page's cells."""
        return _counts_table(self.counts(k), th_style="text-align:left;padding-right:12px")

    def widget(self):
        """Return the live ipywidgets control (built once): slider, previous/next, play, counts, figure."""
        if self._widget is not None:
            return self._widget
        import ipywidgets as widgets

        n = len(self)
        slider = widgets.IntSlider(value=0, min=0, max=n - 1, step=1, description="step",
                                   continuous_update=True, readout=True)
        slider.add_class("kv-slider")
        prev_button = widgets.Button(description="◀ Previous", tooltip="previous step")
        prev_button.add_class("kv-prev")
        next_button = widgets.Button(description="Next ▶", tooltip="next step")
        next_button.add_class("kv-next")
        play = widgets.Play(value=0, min=0, max=n - 1, step=1, interval=1200, description="play")
        play.add_class("kv-play")
        widgets.jslink((play, "value"), (slider, "value"))
        title = widgets.HTML()
        title.add_class("kv-title")
        counts = widgets.HTML()
        counts.add_class("kv-counts")
        image = widgets.Image(format="png")
        image.add_class("kv-frame")

        def show(k: int) -> None:
            c = self.counts(k)
            title.value = f"<b>Step {k + 1} of {n} · {html.escape(c['spec_ref'])} {html.escape(c['title'])}</b>"
            counts.value = self.counts_html(k)
            image.value = self.frame(k)

        slider.observe(lambda change: show(int(change["new"])), names="value")
        prev_button.on_click(lambda _: setattr(slider, "value", max(0, slider.value - 1)))
        next_button.on_click(lambda _: setattr(slider, "value", min(n - 1, slider.value + 1)))
        show(0)
        box = widgets.VBox([widgets.HBox([prev_button, slider, next_button, play]), title, counts, image])
        box.add_class("kv-stepper")
        self._widget = box
        return box

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Return the widget's bundle (when ipywidgets works) plus the static HTML and a text summary."""
        bundle: dict[str, Any] = {"text/plain": repr(self), "text/html": self.to_html()}
        try:
            view = self.widget()._repr_mimebundle_()
        except Exception:  # noqa: BLE001 - no ipywidgets or no kernel: the static stepper stands alone
            view = None
        if isinstance(view, tuple):
            view = view[0]
        if view:
            bundle.update({k: v for k, v in view.items() if k != "text/plain"})
        return bundle

    def _ipython_display_(self) -> None:
        """Display the bundle of :meth:`_repr_mimebundle_` (widget when a kernel renders it, else static)."""
        from IPython.display import display

        display(self._repr_mimebundle_(), raw=True)


__all__ = ["Stepper"]
