"""Step through a replay: a live ipywidgets control in Jupyter, a self-contained HTML stepper everywhere else.

``Stepper(trace)`` shows one rank of a :class:`~kimi_viz.split.trace.Trace` (the first failing rank
by default) one step at a time, opening at the step where SGLang raises (the first step of a clean
rank). Both forms look the same: a heading with the rank and its outcome (``FAIL`` in the failure
colour), the controls, "Step k of n" matching the slider (which counts from 1), the step's note,
check and key variables as HTML text, and the row tracks of :func:`~kimi_viz.plots.steps.draw_step`
as a figure whose text is at least 10 CSS px at the size it is shown. The whole stepper fits a
1440×900 window.

In a notebook with a kernel it is a widget; beside it the cell also carries :meth:`Stepper.to_html`,
the static stepper (inline CSS and JavaScript, frames as PNG data URIs), which hides itself when the
live widget renders next to it. Exported notebooks (nbconvert HTML) and reports therefore step
through without a kernel or a network; where the static stepper's script cannot run (a reopened,
untrusted notebook) it says so and how to get a working one.

Stable hooks for browser tests, in both forms: ``.kv-stepper`` (root), ``input.kv-slider`` (static)
or ``.kv-slider`` (widget), ``button.kv-prev``, ``button.kv-next``, ``.kv-play``, ``.kv-counts``,
``.kv-frame``, ``.kv-title``, ``.kv-heading`` and ``.kv-vars``.
"""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..forward.trace import ENCODE_CALL
from ..split.trace import prod
from .page import escape, figure_png, json_for_script, png_data_uri

if TYPE_CHECKING:  # pragma: no cover
    from ..forward.trace import ForwardTrace
    from ..split.trace import RankTrace, Step, Trace

FRAME_DPI = 100  # the frames' text is 9 pt: 12.5 px at this dpi
FRAME_WIDTH_PX = 950  # shown at this width at most (never scaled up), so text stays >= 10 px
FAIL_COLOR = "#B34000"
PASS_COLOR = "#006B4F"
_ids = itertools.count(1)

CSS = """
.kv-stepper { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; font-size: 14px; color: #111;
  border: 1px solid #bbb; border-radius: 6px; padding: 8px 12px; margin: 8px 0; max-width: 980px; }
.kv-stepper .kv-heading { font-weight: 700; font-size: 15px; margin: 0 0 6px; }
.kv-stepper .kv-controls { display: flex; align-items: center; gap: 8px; flex-wrap: wrap; }
.kv-stepper button { font: inherit; padding: 3px 10px; border: 1px solid #666; border-radius: 4px;
  background: #f4f4f4; cursor: pointer; }
.kv-stepper button:focus-visible, .kv-stepper input:focus-visible { outline: 2px solid #0072B2; }
.kv-stepper input.kv-slider { flex: 1 1 260px; }
.kv-stepper .kv-title { font-weight: 600; margin: 6px 0 2px; }
.kv-stepper .kv-note { font-style: italic; color: #333; margin: 2px 0; font-size: 13px; }
.kv-stepper .kv-body { display: flex; gap: 12px; flex-wrap: wrap; align-items: flex-start; }
.kv-stepper table { border-collapse: collapse; margin: 4px 0; font-size: 13px; }
.kv-stepper th, .kv-stepper td { border: 1px solid #ccc; padding: 1px 6px; text-align: left;
  font-variant-numeric: tabular-nums; vertical-align: top; }
.kv-stepper th { background: #f0f0f0; font-weight: 600; }
.kv-stepper td.kv-var { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, monospace; font-size: 12px;
  max-width: 560px; overflow-wrap: anywhere; }
.kv-stepper .kv-fail { color: #B34000; font-weight: 700; }
.kv-stepper .kv-pass { color: #006B4F; font-weight: 600; }
.kv-stepper img.kv-frame { width: 100%; max-width: 950px; min-width: 760px; height: auto; display: block; }
.kv-stepper .kv-script-note { background: #fff3d6; border: 1px solid #E69F00; padding: 4px 8px; margin: 4px 0;
  font-size: 13px; }
"""

JS = """
(function () {
  var root = document.getElementById(%(root)s);
  if (!root) { return; }
  var note = root.querySelector(".kv-script-note");
  if (note) { note.hidden = true; }
  var data = JSON.parse(root.querySelector("script.kv-data").textContent);
  var n = data.steps.length;
  var slider = root.querySelector("input.kv-slider");
  var frame = root.querySelector("img.kv-frame");
  var play = root.querySelector("button.kv-play");
  var timer = null;
  function show(k) {
    k = Math.max(1, Math.min(n, k));
    slider.value = k;
    var s = data.steps[k - 1];
    frame.src = s.frame;
    frame.alt = s.alt;
    root.querySelector(".kv-title").textContent = s.title;
    root.querySelector(".kv-position").textContent = "Step " + k + " of " + n;
    root.querySelector(".kv-note").textContent = s.note;
    root.querySelector(".kv-counts").innerHTML = s.counts;
    root.querySelector(".kv-vars").innerHTML = s.vars;
  }
  function current() { return parseInt(slider.value, 10); }
  function stop() { if (timer !== null) { clearInterval(timer); timer = null; play.textContent = "\\u25b6 Play"; } }
  slider.addEventListener("input", function () { stop(); show(current()); });
  root.querySelector("button.kv-prev").addEventListener("click", function () { stop(); show(current() - 1); });
  root.querySelector("button.kv-next").addEventListener("click", function () { stop(); show(current() + 1); });
  play.addEventListener("click", function () {
    if (timer !== null) { stop(); return; }
    play.textContent = "\\u23f8 Pause";
    if (current() >= n) { show(1); }
    timer = setInterval(function () { if (current() >= n) { stop(); return; } show(current() + 1); }, 1200);
  });
  root.addEventListener("keydown", function (event) {
    if (event.key === "ArrowRight") { stop(); show(current() + 1); }
    if (event.key === "ArrowLeft") { stop(); show(current() - 1); }
  });
  // Beside a live widget of the same cell, the static copy steps aside.
  var area = root.closest(".jp-OutputArea, .output_area, .output");
  function live() { return area && area.querySelector(".kv-stepper.kv-live"); }
  if (area) {
    var tries = 0;
    var poll = setInterval(function () {
      tries += 1;
      if (live()) { root.hidden = true; clearInterval(poll); }
      if (tries > 40) { clearInterval(poll); }
    }, 250);
  }
  show(data.start);
})();
"""

COUNT_ROWS = (
    ("images", "images on this rank"),
    ("expected_rows", "rows the grids expect"),
    ("produced_rows", "rows produced so far"),
    ("check", "check"),
    ("check_detail", "compared"),
    ("error", "SGLang raises"),
)


def _cell(key: str, value: Any) -> str:
    """Return one counts cell, the check and error coloured inline (so the widget shows them the same)."""
    text = "—" if value is None else str(value)
    css, style = "", ""
    if key == "check" and value in ("PASS", "FAIL"):
        css = "kv-pass" if value == "PASS" else "kv-fail"
        style = f"color:{PASS_COLOR if value == 'PASS' else FAIL_COLOR};font-weight:700"
    elif key == "error" and value:
        css, style = "kv-fail", f"color:{FAIL_COLOR};font-weight:700"
    return f'<td class="{css}" data-key="{key}" style="{style}">{escape(text)}</td>'


class Stepper:
    """Step through one rank of a replay; a widget in Jupyter, static HTML elsewhere.

    With ``forward`` (a :class:`~kimi_viz.forward.embedding.ForwardTrace` whose call ``trace`` is), the
    steps are the whole forward pass: the scheduler's steps before the call (the batch, the path, the
    cache lookups), the rank's deferred-split steps, then the splice (split back, slices, token
    count, length fit, scatter). :meth:`for_forward` builds one from a pass alone.
    """

    def __init__(
        self,
        trace: Trace | None,
        *,
        rank: int | None = None,
        dpi: int = FRAME_DPI,
        forward: ForwardTrace | None = None,
    ):
        from ..plots.steps import resolve_rank

        if trace is None and forward is None:
            raise ConfigError("Stepper: give a replay trace, or a forward pass (forward=...)")
        self.trace = trace
        self.forward = forward
        self.rank: RankTrace | None = None if trace is None else resolve_rank(trace, rank)
        split = [] if self.rank is None else [("split", step) for step in self.rank.steps]
        if forward is None:
            self._steps: list[tuple[str, Step]] = split
        else:
            names = [step.name for step in forward.steps]
            cut = names.index(ENCODE_CALL) if ENCODE_CALL in names else len(names)
            before = [("forward", step) for step in forward.steps[:cut]]
            after = [("forward", step) for step in forward.steps[cut + 1 :]]
            call = [("forward", forward.steps[cut])] if cut < len(names) and not split else []
            self._steps = before + (split or call) + after
        self.dpi = int(dpi)
        self._frames: list[bytes | None] = [None] * len(self._steps)
        self._drawn: dict[tuple, bytes] = {}  # one PNG per distinct picture: steps that change nothing share it
        self._widget: Any = None

    @classmethod
    def for_forward(cls, forward: ForwardTrace, *, rank: int | None = None, dpi: int = FRAME_DPI) -> Stepper:
        """Return a stepper over a whole forward pass, through the failing (else the first) call's failing rank."""
        calls = [c for c in forward.calls if c.trace is not None]
        failing = next((c for c in calls if c.trace is not None and c.trace.error is not None), None)
        chosen = failing or (calls[0] if calls else None)
        return cls(None if chosen is None else chosen.trace, rank=rank, dpi=dpi, forward=forward)

    def __len__(self) -> int:
        return len(self._steps)

    def _step(self, k: int) -> Step:
        return self._steps[k][1]

    def __repr__(self) -> str:
        where = "forward pass" if self.rank is None else f"rank {self.rank.rank}"
        tp = self.trace.tp_size if self.trace is not None else self.forward.tp_size  # type: ignore[union-attr]
        return f"Stepper({where} of TP {tp}, {len(self)} steps, {'error' if self._error() is not None else 'ok'})"

    def _error(self) -> Any:
        if self.forward is not None and self.forward.error is not None:
            return self.forward.error
        return None if self.rank is None else self.rank.error

    @property
    def start(self) -> int:
        """Return the step the stepper opens at, counted from 1: where SGLang raises, else step 1."""
        failing = next((k for k, (_, step) in enumerate(self._steps) if step.error is not None), None)
        return 1 if failing is None else failing + 1

    def _head(self) -> str:
        forward = self.forward
        if self.trace is not None:
            release, tp = self.trace.release.label, self.trace.tp_size
        else:
            assert forward is not None
            release = f"SGLang {forward.release.version} ({forward.release.code_path} path)"
            tp = forward.tp_size
        where = "The forward pass" if self.rank is None else f"Rank {self.rank.rank}"
        if self.forward is not None:
            n = len(self.forward.batch)
            where += f" ({n} request{'s' if n != 1 else ''} prefilled together)" if n > 1 else " (1 request)"
        return f"{where} of attention-TP {tp}, {release}: "

    @property
    def heading(self) -> str:
        """Return the stepper's heading: the rank (and the forward pass), the release replayed and the outcome."""
        error = self._error()
        outcome = "ok" if error is None else f"FAIL — {error.type}: {error.message}"
        return self._head() + outcome

    def heading_html(self) -> str:
        """Return the heading as HTML, FAIL in the failure colour."""
        head = escape(self._head())
        error = self._error()
        if error is None:
            return head + f'<span class="kv-pass" style="color:{PASS_COLOR}">ok</span>'
        return (
            head + f'<span class="kv-fail" style="color:{FAIL_COLOR};font-weight:700">FAIL</span> — '
            f"{escape(error.type)}: {escape(error.message)}"
        )

    # --- data -----------------------------------------------------------------------------------
    def _check_index(self, k: int) -> int:
        n = len(self)
        if isinstance(k, bool) or not isinstance(k, int) or not -n <= k < n:
            raise ConfigError(f"step {k!r} does not exist; this stepper has steps 0..{n - 1} (or -{n}..-1)")
        return k % n

    def frame(self, k: int) -> bytes:
        """Return the PNG bytes of step ``k``'s row tracks (drawn once, then cached; ``k`` from 0)."""
        k = self._check_index(k)
        if self._frames[k] is None:
            kind = self._steps[k][0]
            if kind == "forward":
                from ..plots.forward import draw_forward_pass

                if ("forward",) not in self._drawn:
                    ax = draw_forward_pass(self.forward)  # type: ignore[arg-type]
                    self._drawn[("forward",)] = figure_png(ax.figure, dpi=self.dpi)
                self._frames[k] = self._drawn[("forward",)]
                return self._frames[k]  # type: ignore[return-value]
            from ..plots.steps import draw_step, step_drawing_key

            assert self.trace is not None and self.rank is not None
            index = self._split_index(k)
            key = step_drawing_key(self.trace, index, rank=self.rank.rank)
            if key not in self._drawn:
                ax = draw_step(self.trace, index, rank=self.rank.rank, text=False)
                self._drawn[key] = figure_png(ax.figure, dpi=self.dpi)
            self._frames[k] = self._drawn[key]
        return self._frames[k]  # type: ignore[return-value]

    def _split_index(self, k: int) -> int:
        """Return the rank step that combined step ``k`` is."""
        return sum(1 for kind, _ in self._steps[:k] if kind == "split")

    def frames(self) -> list[bytes]:
        """Return the PNG bytes of every step, in order."""
        return [self.frame(k) for k in range(len(self))]

    def counts(self, k: int) -> dict[str, Any]:
        """Return the counts shown beside step ``k`` (from 0): images, expected and produced rows, check, error."""
        k = self._check_index(k)
        step = self._step(k)
        if self._steps[k][0] == "forward":
            return self._forward_counts(k, step)
        assert self.trace is not None
        if step.rows is None:
            grids = self.trace.grid_thws_host or []
            images = len(self.trace.batch.items)
            expected = sum(prod(g) for g in grids) if grids else None
            produced = None
        else:
            images = len(step.rows)
            expected = sum(r.expected_rows for r in step.rows)
            known = [r.produced_rows for r in step.rows if r.produced_rows is not None]
            produced = sum(known) if known else None
        check = step.check
        detail = None
        if check is not None and not isinstance(check.expected, (list, dict)):
            detail = f"expected {check.expected}, actual {check.actual}"
        elif check is not None:
            detail = check.name
        return self._row(k, step, images, expected, produced, detail)

    def _forward_counts(self, k: int, step: Step) -> dict[str, Any]:
        """Return the counts of a scheduler or splice step: the batch's images, the check, the error."""
        forward = self.forward
        assert forward is not None
        check = step.check
        scalar = check is not None and not isinstance(check.expected, (list, dict))
        return self._row(
            k,
            step,
            sum(len(r.items) for r in forward.batch),
            check.expected if scalar and check is not None else None,
            check.actual if scalar and check is not None else None,
            None if check is None else check.name,
        )

    def _row(self, k: int, step: Step, images: Any, expected: Any, produced: Any, detail: Any) -> dict[str, Any]:
        """Return the counts of step ``k`` from its figures and the step's own check and error."""
        check = step.check
        return {
            "step": k + 1,
            "position": f"Step {k + 1} of {len(self)}",
            "name": step.name,
            "title": step.title,
            "spec_ref": step.spec_ref,
            "images": images,
            "expected_rows": expected,
            "produced_rows": produced,
            "check": None if check is None else ("PASS" if check.passed else "FAIL"),
            "check_detail": detail,
            "error": None if step.error is None else f"{step.error.type}: {step.error.message}",
        }

    def title(self, k: int) -> str:
        """Return ``"§6.x Title"`` of step ``k`` (from 0)."""
        step = self._step(self._check_index(k))
        return f"{step.spec_ref} {step.title}"

    def counts_html(self, k: int) -> str:
        """Return the counts of step ``k`` as the ``table.kv-counts`` markup both forms show."""
        counts = self.counts(k)
        rows = "".join(
            f'<tr><th scope="row">{escape(label)}</th>{_cell(key, counts[key])}</tr>' for key, label in COUNT_ROWS
        )
        return f'<table class="kv-counts">{rows}</table>'

    def vars_html(self, k: int) -> str:
        """Return step ``k``'s check and key variables as an HTML table (text, not pixels)."""
        from ..plots.steps import key_variables

        step = self._step(self._check_index(k))
        rows = []
        if step.check is not None:
            verdict = "PASS" if step.check.passed else "FAIL"
            color = PASS_COLOR if step.check.passed else FAIL_COLOR
            rows.append(
                f'<tr><th scope="row">check</th><td class="kv-var"><span style="color:{color};'
                f'font-weight:700">{verdict}</span> {escape(step.check.name)}</td></tr>'
            )
        rows += [
            f'<tr><th scope="row">{escape(key)}</th><td class="kv-var">{escape(value)}</td></tr>'
            for key, value in key_variables(step)
        ]
        return f'<table class="kv-vars">{"".join(rows)}</table>'

    def _step_data(self, k: int) -> dict[str, Any]:
        step = self._step(k)
        picture = (
            "the forward pass: prompts, the call, rows on pad tokens"
            if self._steps[k][0] == "forward"
            else "the rank's expected and produced rows"
        )
        return {
            "frame": png_data_uri(self.frame(k)),
            "title": self.title(k),
            "note": step.note,
            "alt": f"step {k + 1}: {step.title}, {picture}",
            "counts": self.counts_html(k),
            "vars": self.vars_html(k),
        }

    # --- static HTML ------------------------------------------------------------------------------
    def to_html(self) -> str:
        """Return a self-contained static stepper: inline CSS and JS, PNG frames as data URIs, no network."""
        root = f"kv-stepper-{next(_ids)}"
        n = len(self)
        steps = [self._step_data(k) for k in range(n)]
        k = self.start
        first = steps[k - 1]
        rank = "" if self.rank is None else self.rank.rank
        data = {
            "steps": steps,
            "start": k,
            "rank": rank,
            "heading": self.heading,
        }
        return (
            f'<div class="kv-stepper kv-static" id="{root}" data-steps="{n}" data-rank="{rank}" '
            f'data-start="{k}" tabindex="0">\n'
            f"<style>{CSS}</style>\n"
            f'<div class="kv-heading">{self.heading_html()}</div>\n'
            '<p class="kv-script-note">This static stepper needs its script, which did not run here (Jupyter '
            "does not run scripts in a reopened notebook's outputs). Re-run the cell for the live stepper, trust "
            "the notebook, or open an HTML export of it in a browser; the figure below is the step shown.</p>\n"
            '<div class="kv-controls">'
            '<button type="button" class="kv-prev" aria-label="previous step">&#9664; Previous</button>'
            f'<input type="range" class="kv-slider" min="1" max="{n}" step="1" value="{k}" aria-label="step">'
            '<button type="button" class="kv-next" aria-label="next step">Next &#9654;</button>'
            '<button type="button" class="kv-play" aria-label="play the steps">&#9654; Play</button>'
            f'<span class="kv-position">Step {k} of {n}</span></div>\n'
            f'<div class="kv-title">{escape(first["title"])}</div>\n'
            f'<div class="kv-note">{escape(first["note"])}</div>\n'
            f'<div class="kv-body">{first["counts"]}{first["vars"]}</div>\n'
            f'<img class="kv-frame" src="{first["frame"]}" alt="{escape(first["alt"])}">\n'
            f'<script type="application/json" class="kv-data">{json_for_script(data)}</script>\n'
            f"<script>{JS % {'root': json.dumps(root)}}</script>\n"
            "</div>"
        )

    # --- live widget ------------------------------------------------------------------------------
    def widget(self) -> Any:
        """Return the live ipywidgets control (built once): the same heading, controls, text and figure."""
        if self._widget is not None:
            return self._widget
        import ipywidgets as widgets

        n = len(self)
        slider = widgets.IntSlider(
            value=self.start,
            min=1,
            max=n,
            step=1,
            description="step",
            continuous_update=True,
            readout=True,
            layout=widgets.Layout(width="420px"),
        ).add_class("kv-slider")
        prev_button = widgets.Button(
            description="◀ Previous", tooltip="previous step", layout=widgets.Layout(width="auto")
        ).add_class("kv-prev")
        next_button = widgets.Button(description="Next ▶", tooltip="next step", layout=widgets.Layout(width="auto"))
        next_button.add_class("kv-next")
        play = widgets.Play(value=self.start, min=1, max=n, step=1, interval=1200, description="play")
        play.add_class("kv-play")
        widgets.jslink((play, "value"), (slider, "value"))
        heading = widgets.HTML(
            f'<div class="kv-heading" style="font-weight:700;font-size:15px">{self.heading_html()}</div>'
        )
        position, title, counts, variables = (
            widgets.HTML().add_class(f"kv-{name}") for name in ("position", "title", "counts", "vars")
        )
        image = widgets.Image(format="png", layout=widgets.Layout(width=f"{FRAME_WIDTH_PX}px", max_width="100%"))
        image.add_class("kv-frame")
        table_style = (
            "<style>.kv-live table{border-collapse:collapse;font-size:13px}.kv-live th,.kv-live td"
            "{border:1px solid #ccc;padding:1px 6px;text-align:left;vertical-align:top}"
            ".kv-live th{background:#f0f0f0}.kv-live td.kv-var{font-family:monospace;font-size:12px;"
            "max-width:560px;overflow-wrap:anywhere}</style>"
        )

        def show(k: int) -> None:
            i = k - 1
            step = self._step(i)
            position.value = f"<b>Step {k} of {n}</b>"
            title.value = f"<b>{escape(self.title(i))}</b><br><i style='font-size:13px'>{escape(step.note)}</i>"
            counts.value = table_style + self.counts_html(i)
            variables.value = self.vars_html(i)
            image.value = self.frame(i)

        slider.observe(lambda change: show(int(change["new"])), names="value")
        prev_button.on_click(lambda _: setattr(slider, "value", max(1, slider.value - 1)))
        next_button.on_click(lambda _: setattr(slider, "value", min(n, slider.value + 1)))
        show(self.start)
        controls = widgets.HBox([prev_button, slider, next_button, play, position])
        box = widgets.VBox(
            [heading, controls, title, widgets.HBox([counts, variables]), image],
            layout=widgets.Layout(max_width="990px", border="1px solid #bbb", padding="6px 10px"),
        )
        box.add_class("kv-stepper")
        box.add_class("kv-live")
        self._widget = box
        return box

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """Return the static stepper's bundle (HTML plus a text summary)."""
        return {"text/plain": repr(self), "text/html": self.to_html()}

    def _ipython_display_(self) -> None:
        """Display the live widget (when ipywidgets works) and the static stepper, which steps aside beside it."""
        from IPython.display import HTML, display

        try:
            view = self.widget()
        except Exception:  # noqa: BLE001 - no ipywidgets: the static stepper stands alone
            view = None
        if view is not None:
            display(view)
        display(HTML(self.to_html()))


__all__ = ["Stepper", "FRAME_DPI", "FRAME_WIDTH_PX"]
