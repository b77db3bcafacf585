"""Griffe extension: render the reStructuredText habits of epfabric's docstrings as Markdown.

The docstrings are numpydoc (read by mkdocstrings' numpy parser) with a few
reStructuredText constructs that Markdown would show raw. Before a docstring
is parsed this extension rewrites, in the rendered copy only:

* cross-reference roles (``:class:`~epfabric.hw.die.Die```, ``:func:`run```,
  ``:mod:``, ``:meth:``, ``:attr:``, ``:data:``) → inline code naming the
  object (the short name when the target starts with ``~``);
* ``:sub:`x``` → ``<sub>x</sub>``, and reST's escaped space ``\\ `` → nothing;
* a paragraph ending in ``::`` followed by an indented block → the paragraph
  ending in ``:`` and the block as a fenced code block;
* simple tables (``====  ====`` borders) → a fenced text block, column
  alignment kept;
* section titles other than numpydoc's (a title over ``-----``) → a bold line (Markdown
  would make them headings of the page);
* ````x```` → ```x``` outside fenced blocks (the same code span, but also in the
  parameter and attribute tables, which show a type verbatim).

The sources are not changed.
"""

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|attr|data|obj|exc|const):`([^`]+)`")
SUB = re.compile(r":sub:`([^`]+)`")
BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")
UNDERLINE = re.compile(r"^\s*-{3,}\s*$")
DOUBLE = re.compile(r"``([^`]+)``")
NUMPY_SECTIONS = {"Parameters", "Other Parameters", "Returns", "Yields", "Receives", "Raises",
                  "Warns", "Warnings", "Attributes", "Methods", "See Also", "Notes", "Examples",
                  "References", "Functions", "Classes", "Modules"}


def _role(match):
    target = match.group(1).strip()
    if "<" in target and target.endswith(">"):          # :role:`text <target>`
        return f"`{target[:target.index('<')].strip()}`"
    if target.startswith("~"):
        target = target[1:].rsplit(".", 1)[-1]
    return f"`{target}`"


def _indent(line):
    return len(line) - len(line.lstrip())


def _literal_blocks(lines):
    out, i = [], 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            # the block: after blank lines, every line indented deeper than this one (or blank)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            base = _indent(line)
            if j < len(lines) and _indent(lines[j]) > base:
                k = j
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > base):
                    k += 1
                while k > j and not lines[k - 1].strip():
                    k -= 1
                head = line.rstrip()[:-2].rstrip()
                if head.strip():
                    out.append(head + ":")
                    out.append("")
                block = lines[j:k]
                cut = min(_indent(b) for b in block if b.strip())
                pad = " " * base
                out.append(pad + "```text")
                out += [pad + b[cut:] if b.strip() else "" for b in block]
                out.append(pad + "```")
                i = k
                continue
        out.append(line)
        i += 1
    return out


def _table_end(lines, top):
    """Index of the bottom border of the simple table whose top border is ``lines[top]``.

    A table has two borders (no header) or three (a header separator, which a row follows);
    the bottom border is the one followed by a blank line or the end of the text.
    """
    for j in range(top + 1, len(lines)):
        if BORDER.match(lines[j]) and (j + 1 == len(lines) or not lines[j + 1].strip()):
            return j
        if not lines[j].strip():
            return None
    return None


def _tables(lines):
    out, i = [], 0
    while i < len(lines):
        end = _table_end(lines, i) if BORDER.match(lines[i]) else None
        if end is not None:
            pad = " " * _indent(lines[i])
            out.append(pad + "```text")
            out += lines[i:end + 1]
            out.append(pad + "```")
            i = end + 1
            continue
        out.append(lines[i])
        i += 1
    return out


def _titles(lines):
    """reST section titles other than numpydoc's (``Title`` over ``-----``) → a bold line."""
    out = []
    for line in lines:
        if UNDERLINE.match(line) and out and out[-1].strip():
            # the title: the lines since the last blank one
            k = len(out)
            while k > 0 and out[k - 1].strip():
                k -= 1
            title = " ".join(s.strip() for s in out[k:])
            if title not in NUMPY_SECTIONS:
                pad = " " * _indent(out[k])
                out[k:] = [f"{pad}**{title}**", ""]
                continue
        out.append(line)
    return out


def _code(lines):
    """``x`` → `x` outside fenced blocks (inside them columns stay aligned)."""
    out, fenced = [], False
    for line in lines:
        if line.strip().startswith("```"):
            fenced = not fenced
        out.append(line if fenced else DOUBLE.sub(r"`\1`", line))
    return out


def markdown(text):
    """``text`` (a docstring) with the reStructuredText constructs above rewritten."""
    text = ROLE.sub(_role, text)
    text = SUB.sub(r"<sub>\1</sub>", text)
    text = text.replace("\\ ", "")
    lines = _literal_blocks(_titles(_tables(text.split("\n"))))
    return "\n".join(_code(lines))


class RstDocstrings(griffe.Extension):
    """Rewrite each object's docstring as it is loaded (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
