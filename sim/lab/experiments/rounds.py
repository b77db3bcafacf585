"""The preregistration's rounds, read from its section 12 (the one place they are written).

docs/fidelity/preregistration.md §12 ("Rounds") is a table, one row a round: what it
set or changed and why. A change made after seeing a held-out result is a new round,
and the validation's output says how many there were and what each changed: it reads
them here, from the page itself, so no second list can drift from it.
"""

from pathlib import Path

__all__ = ["PREREGISTRATION", "read_rounds", "rounds_line"]

#: the preregistration in a checkout (an installed wheel has no docs/: no rounds to read)
PREREGISTRATION = Path(__file__).resolve().parents[3] / "docs" / "fidelity" / "preregistration.md"
HEADING = "## 12. Rounds"


def read_rounds(text):
    """``[{round, committed, changed, why}]`` from the table under :data:`HEADING` in ``text``.

    ``ValueError`` when the heading or its table is missing.
    """
    lines = text.splitlines()
    try:
        start = next(i for i, line in enumerate(lines) if line.strip() == HEADING)
    except StopIteration:
        raise ValueError(f"the preregistration has no section {HEADING!r}") from None
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("## "):
            break
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "round" or set(cells[0]) <= set("-: "):
            continue                                      # the header and its rule
        rows.append(dict(zip(("round", "committed", "changed", "why"), cells)))
    if not rows:
        raise ValueError(f"the preregistration's {HEADING!r} has no table rows")
    return rows


def rounds_line(path=PREREGISTRATION):
    """``2 rounds: 0 (before this page): …; 1 (…): …`` — or why there are none to read."""
    try:
        rounds = read_rounds(Path(path).read_text())
    except FileNotFoundError:
        return f"rounds: {path} is not in this installation"
    except ValueError as exc:
        return f"rounds: {exc}"
    return (f"{len(rounds)} round{'s' if len(rounds) != 1 else ''} "
            f"(preregistration §12): "
            + "; ".join(f"{r['round']} ({r['committed'].strip('*() ')}): {r['changed']}"
                        for r in rounds))
