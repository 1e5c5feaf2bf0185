"""Readability checks of a drawn matplotlib figure: no two pieces of text overlap.

:func:`overlapping_texts` draws the figure, takes the window extent (the on-screen
bounding box, in pixels) of every visible, non-empty text -- titles, axis labels,
tick labels, legend entries, annotations -- and returns the pairs whose boxes
intersect by more than ``min_area`` square pixels. A per-point text label placed
next to every marker of a crowded scatter fails it; one legend does not.
:func:`texts_outside` returns the texts cut off by the figure's edge, and
:func:`indistinct_legend_entries` the legend entries a reader cannot tell apart.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Overlap:
  """Two texts whose boxes intersect: their strings and the shared area (pixels^2)."""

  first: str
  second: str
  area: float


def text_boxes(fig) -> list:
  """``(string, Bbox)`` of every non-empty text that drawing ``fig`` actually draws
  (a tick label outside the view limits exists but is not drawn, so it is not
  counted): ``Text.draw`` is wrapped for the one draw and records its texts."""
  from matplotlib.text import Text
  drawn = []
  original = Text.draw

  def recording_draw(self, renderer):
    if self.get_visible() and self.get_text().strip():
      drawn.append(self)
    return original(self, renderer)

  Text.draw = recording_draw
  try:
    fig.canvas.draw()
  finally:
    Text.draw = original
  renderer = fig.canvas.get_renderer()
  return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn]


def overlapping_texts(fig, min_area: float = 1.0) -> list[Overlap]:
  """Every pair of texts of ``fig`` whose boxes share more than ``min_area`` pixels^2
  (``min_area`` must be >= 0)."""
  if min_area < 0:
    raise ValueError(f"min_area={min_area!r}: must be >= 0 (square pixels)")
  boxes = text_boxes(fig)
  out = []
  for i, (s1, b1) in enumerate(boxes):
    for s2, b2 in boxes[i + 1:]:
      w = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
      h = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
      if w > 0 and h > 0 and w * h > min_area:
        out.append(Overlap(s1, s2, float(w * h)))
  return out


def texts_outside(fig, tolerance: float = 1.0) -> list[str]:
  """The drawn texts of ``fig`` that reach more than ``tolerance`` pixels past the
  figure's edge (cut off in the saved image)."""
  if tolerance < 0:
    raise ValueError(f"tolerance={tolerance!r}: must be >= 0 (pixels)")
  fb = fig.bbox
  return [s for s, b in text_boxes(fig)
          if b.x0 < fb.x0 - tolerance or b.y0 < fb.y0 - tolerance
          or b.x1 > fb.x1 + tolerance or b.y1 > fb.y1 + tolerance]


def _style(handle) -> tuple | None:
  """What a legend handle draws (colour, line style, marker, marker face), or None for
  a handle that draws nothing (a heading such as "marker = drafter")."""
  from matplotlib.colors import to_hex
  from matplotlib.lines import Line2D
  from matplotlib.patches import Patch
  if isinstance(handle, Line2D):
    ls, marker = handle.get_linestyle(), handle.get_marker()
    if ls in ("None", "none", "", " ") and marker in ("None", "none", "", " ", None):
      return None
    face = handle.get_markerfacecolor()
    return ("line", to_hex(handle.get_color()), ls, marker,
            face if isinstance(face, str) else to_hex(face))
  if isinstance(handle, Patch):
    return ("patch", to_hex(handle.get_facecolor()), to_hex(handle.get_edgecolor()))
  return None


def indistinct_legend_entries(fig) -> list[tuple[str, ...]]:
  """Groups of labels within one legend of ``fig`` whose handles look the same --
  e.g. four reference lines all drawn black dotted: the reader cannot tell which
  line is which. Handles of other kinds than lines and patches are not compared."""
  legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
  out = []
  for leg in legends:
    by_style: dict[tuple, set] = {}
    for handle, text in zip(leg.legend_handles, leg.get_texts()):
      key = _style(handle)
      if key is not None and text.get_text().strip():
        by_style.setdefault(key, set()).add(text.get_text())
    out += [tuple(sorted(labels)) for labels in by_style.values() if len(labels) > 1]
  return out
