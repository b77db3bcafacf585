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
  alignment kept.

The sources are not changed.
"""

import re

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|func|mod|meth|attr|data|obj|exc|const):`([^`]+)`")
SUB = re.compile(r":sub:`([^`]+)`")
BORDER = re.compile(r"^\s*=+(\s+=+)+\s*$")


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


def _tables(lines):
    out, i = [], 0
    while i < len(lines):
        if BORDER.match(lines[i]):
            # a simple table: three borders (top, under the header, bottom)
            borders, j = [i], i + 1
            while j < len(lines) and len(borders) < 3:
                if BORDER.match(lines[j]):
                    borders.append(j)
                j += 1
            if len(borders) == 3:
                pad = " " * _indent(lines[i])
                out.append(pad + "```text")
                out += lines[i:borders[2] + 1]
                out.append(pad + "```")
                i = borders[2] + 1
                continue
        out.append(lines[i])
        i += 1
    return out


def markdown(text):
    """``text`` (a docstring) with the reStructuredText constructs above rewritten."""
    text = ROLE.sub(_role, text)
    text = SUB.sub(r"<sub>\1</sub>", text)
    text = text.replace("\\ ", "")
    lines = _tables(text.split("\n"))
    return "\n".join(_literal_blocks(lines))


class RstDocstrings(griffe.Extension):
    """Rewrite each object's docstring as it is loaded (see the module docstring)."""

    def on_instance(self, *, obj, **kwargs):
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)
