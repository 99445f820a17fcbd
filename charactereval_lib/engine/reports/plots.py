"""Figure building blocks every benchmark's reports share: canvases, PNG output, CJK fonts,
count axes, message panels and the radar. A benchmark's own figures (``charactereval.figures``)
compose them; ``save_png`` writes one and ``keep`` renders one for display (and saves it beside
the report).

Figures are built on the Agg canvas directly (no pyplot): nothing depends on, or changes, a
global backend, and no figure accumulates in pyplot's registry. Chinese text (character and
novel names, the ``role：`` marker) needs a CJK font: ``cjk_font`` finds one when installed
(Debian: ``fonts-noto-cjk``) and every figure is built with it as the fallback for glyphs the
default font lacks; without one, ``font_warnings`` says so for the report's warning box.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

# The runs' colours: seaborn's "deep" palette, the reports' colours since the first release. Its
# values are written here rather than imported: seaborn's import pulls in scipy.stats, about a
# second of CPU in every report's kernel, for ten colours.
RUN_PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3",
               "#937860", "#DA8BC3", "#8C8C8C", "#CCB974", "#64B5CD")
# The paper's models: matplotlib's qualitative colormap Dark2 (eight colours).
BASELINE_PALETTE = "Dark2"
PNG_DPI = 120


# CJK-capable families, most common first (fontconfig names on Debian/Ubuntu, macOS, Windows).
CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "PingFang SC", "Hiragino Sans GB",
    "Heiti SC", "Microsoft YaHei", "SimHei", "AR PL UMing CN",
)
# File name fragments of those fonts, to find one installed after matplotlib cached its font list.
CJK_FONT_FILES = ("notosanscjk", "notoserifcjk", "sourcehansans", "wqy-", "droidsansfallback", "ukai", "uming")
FONT_WARNING = (
    "No CJK font was found, so Chinese text in the figures (character and novel names, speaker "
    "markers) renders as empty boxes. Install one (Debian/Ubuntu: "
    "`apt-get install fonts-noto-cjk`) and render the report again."
)
# Matplotlib's complaint about each glyph no font has: without a CJK font the report says it once.
_MISSING_GLYPH = r"Glyph \d+ .*missing from font"


def color_palette(palette: str | Sequence[str], n_colors: int | None = None) -> list[tuple[float, float, float]]:
    """``n_colors`` RGB colours of ``palette`` (a sequence of colours, or the name of a qualitative
    matplotlib colormap such as ``BASELINE_PALETTE``), cycling when it has fewer; all of them
    when ``n_colors`` is None."""
    colors = list(matplotlib.colormaps[palette].colors) if isinstance(palette, str) else list(palette)
    count = len(colors) if n_colors is None else n_colors
    return [to_rgb(colors[i % len(colors)]) for i in range(count)]


@functools.cache
def cjk_font() -> str | None:
    """The family name of an installed CJK-capable font (``CJK_FONTS`` order), or None. Fonts
    installed after matplotlib cached its font list are found on disk and registered."""
    found = _listed_cjk_font()
    if found is None:
        registered = _register_system_cjk_fonts()
        found = _listed_cjk_font() or (registered[0] if registered else None)
    return found


def _listed_cjk_font() -> str | None:
    listed = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in listed), None)


def _register_system_cjk_fonts() -> list[str]:
    """Register every system font file that looks CJK by its file name; their family names."""
    names = []
    for path in sorted(font_manager.findSystemFonts()):
        if any(part in Path(path).name.lower() for part in CJK_FONT_FILES):
            try:
                font_manager.fontManager.addfont(path)
            except (OSError, RuntimeError):
                continue  # an unreadable font file: the others may do
            names.append(font_manager.FontProperties(fname=path).get_name())
    return names


def font_warnings() -> list[str]:
    """The report's warning about fonts: empty when a CJK font is installed."""
    return [] if cjk_font() else [FONT_WARNING]


def with_cjk_font(build: Callable[..., Figure]) -> Callable[..., Figure]:
    """Build a figure with the CJK font after the default ones: matplotlib then draws each glyph
    the default font lacks (Chinese names, the full-width colon) with it. Text takes its font
    family when it is created, so this must wrap the building, not the drawing."""

    @functools.wraps(build)
    def built_with_fonts(*args: Any, **kwargs: Any) -> Figure:
        cjk = cjk_font()
        with matplotlib.rc_context({"font.family": [*matplotlib.rcParams["font.family"], cjk]} if cjk else {}):
            return build(*args, **kwargs)

    return built_with_fonts


@contextlib.contextmanager
def _glyph_warnings_reported_once() -> Iterator[None]:
    """Without a CJK font, drop matplotlib's warning for every missing glyph while drawing:
    ``font_warnings`` puts one in the report instead."""
    with warnings.catch_warnings():
        if cjk_font() is None:
            warnings.filterwarnings("ignore", message=_MISSING_GLYPH, category=UserWarning)
        yield


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render_png(fig: Figure, *, dpi: int = PNG_DPI) -> bytes:
    """The figure as PNG bytes, trimmed to its content so that no title or legend is clipped."""
    buffer = io.BytesIO()
    with _glyph_warnings_reported_once():
        fig.savefig(buffer, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.15, facecolor="white")
    return buffer.getvalue()


def save_png(fig: Figure, path: Path | str, *, dpi: int = PNG_DPI) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_png(fig, dpi=dpi))
    return path


def keep(fig: Figure, name: str, directory: Path | str | None) -> Any:
    """Render ``fig`` once as PNG, save it as ``directory/name.png`` when a directory is given,
    and return it for display: the report shows exactly the image left beside it."""
    from IPython.display import Image

    png = render_png(fig)
    if directory is not None:
        path = Path(directory) / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    return Image(data=png, format="png")


@with_cjk_font
def message_figure(text: str, width: float = 6, height: float = 1.5) -> Figure:
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig


def count_axis(axis: Any, label: str) -> None:
    """A count axis: integer ticks only, and its unit named."""
    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_label_text(label)


def integer_bins(values: np.ndarray, max_bins: int = 30) -> np.ndarray:
    """Histogram edges for integer data: each bin covers whole numbers, centred on them (edges at
    k - 0.5), several integers per bin when the range is wider than ``max_bins``."""
    low, high = int(np.min(values)), int(np.max(values))
    width = max(1, math.ceil((high - low + 1) / max_bins))
    return np.arange(low, high + width + 1, width) - 0.5


# --- radar -------------------------------------------------------------------------------------


def wrap_label(label: str, width: int = 14) -> str:
    """Break a long axis label at spaces so it stays beside its spoke instead of running off."""
    words, lines = label.split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}".strip()
    return "\n".join(lines)


def radar_axes(ax: Axes, values: pd.DataFrame, axes: Sequence[str], labels: Sequence[str], title: str,
               scale: tuple[float, float]) -> None:
    """One radar on ``ax`` on the benchmark's declared ``scale`` (low, high): runs solid with their
    interval shaded (no shading where it cannot be estimated), paper baselines dashed."""
    low_end, high_end = scale
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    closed = np.append(angles, angles[0])
    ax.set_theta_offset(np.pi / 2)
    ax.set_theta_direction(-1)
    kinds = values.groupby("series", sort=False)["kind"].first()
    run_colors = iter(color_palette(RUN_PALETTE, max(1, int((kinds == "run").sum()))))
    paper_colors = iter(color_palette(BASELINE_PALETTE, max(1, int((kinds == "paper").sum()))))
    for series, kind in kinds.items():
        part = values[values["series"] == series].set_index("axis").reindex(list(axes))
        ring = np.append(part["value"].to_numpy(float), part["value"].iloc[0])
        if kind == "run":
            color = next(run_colors)
            low = part["ci_low"].where(part["estimable"].astype(bool)).to_numpy(float)
            high = part["ci_high"].where(part["estimable"].astype(bool)).to_numpy(float)
            # A full run's intervals are a few hundredths of a point wide: a pale fill under a
            # 2-point line vanished. The band is drawn opaque enough to see, its edges are
            # outlined, and each spoke carries a capped bar (the caller says how wide they are).
            ax.fill_between(closed, np.append(low, low[0]), np.append(high, high[0]), color=color, alpha=0.35,
                            linewidth=0.8, edgecolor=color, zorder=2)
            values_now = part["value"].to_numpy(float)
            has = np.isfinite(low) & np.isfinite(high) & np.isfinite(values_now)
            if has.any():
                ax.errorbar(angles[has], values_now[has], yerr=np.vstack([values_now - low, high - values_now])[:, has],
                            fmt="none", ecolor=color, elinewidth=1.2, capsize=3, zorder=3)
            ax.plot(closed, ring, color=color, linewidth=1.4, marker="o", markersize=3, label=series, zorder=4)
        else:
            ax.plot(closed, ring, color=next(paper_colors), linewidth=1.2, linestyle="--", label=f"{series} (paper)")
    ax.set_ylim(low_end, high_end)
    # The centre is the scale's minimum, not 0: it is labelled on its own (matplotlib does not
    # draw a tick label at the origin). Tick labels sit between the first two spokes on a white
    # patch, clear of the lines.
    ticks = MaxNLocator(nbins=4, integer=True).tick_values(low_end, high_end)
    ax.set_yticks([tick for tick in ticks if low_end < tick <= high_end])
    ax.set_rlabel_position(float(np.degrees(angles[1] / 2)))
    ax.text(0, low_end, f"{low_end:g}", ha="center", va="center", fontsize="small", color="dimgrey",
            bbox={"facecolor": "white", "edgecolor": "lightgrey", "boxstyle": "circle", "pad": 0.2})
    for tick in ax.get_yticklabels():
        tick.set_fontsize("small")
        tick.set_color("dimgrey")
        tick.set_bbox({"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_xticks(angles, list(labels))
    ax.tick_params(axis="x", pad=10)
    ax.set_title(title, pad=28, fontsize="medium")
