"""Matplotlib helpers for experiment figures: headless, titled with the paper's figure, saved atomically."""

from ...output import atomic_path

__all__ = ["subplots", "save", "table_figure"]


def subplots(rows=1, cols=1, *, width=7.0, height=4.2):
    """``(figure, axes)`` on the non-interactive Agg backend; ``axes`` is a flat list."""
    import matplotlib
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(rows, cols, figsize=(width, height), squeeze=False)
    return fig, [ax for row in axes for ax in row]


def save(fig, path, title):
    """Title ``fig`` (the paper's figure or table first), write it to ``path`` (PNG) atomically."""
    import textwrap

    import matplotlib.pyplot as plt
    fig.suptitle(textwrap.fill(title, width=int(fig.get_figwidth() * 12)), fontsize=10)
    fig.tight_layout()
    try:
        with atomic_path(path, suffix=".png") as tmp:
            fig.savefig(tmp, dpi=110)
    finally:
        plt.close(fig)
    return path


def table_figure(experiment, rows, path, columns=None):
    """A figure that is a table: for experiments whose result is text (e.g. the race catalog)."""
    columns = columns or (list(rows[0]) if rows else [])
    cells = [[_short(r.get(c, "")) for c in columns] for r in rows]
    chars = sum(max([len(c)] + [len(row[k]) for row in cells]) for k, c in enumerate(columns))
    fig, (ax,) = subplots(width=max(7.0, 0.07 * chars + 1.0), height=1.0 + 0.3 * (len(rows) + 1))
    ax.axis("off")
    table = ax.table(cellText=cells or [[""] * len(columns)], colLabels=columns, loc="center",
                     cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(7)
    table.auto_set_column_width(list(range(len(columns))))
    return save(fig, path, f"{experiment.paper or experiment.name}: {experiment.title}")


def _short(value, limit=70):
    text = f"{value:.4g}" if isinstance(value, float) else str(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"
