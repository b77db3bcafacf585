"""The documentation stays true to the code: cheap checks, no simulation and no MkDocs build.

CI builds the site separately (``make docs``, ``mkdocs build --strict``: broken links and
anchors, API objects that cannot be found). These tests check what a build cannot see:

* the README is a short guide (at most :data:`README_MAX_LINES` lines);
* no tracked file of ``hw/``, ``sw/``, ``sim/`` or ``tests/`` points outside the repository,
  and every ``docs/...md`` they name exists;
* ``docs/layout.md`` names every room of ``tests/test_layering.py`` and every module file,
  and no path that no longer exists;
* every registered experiment, kernel, command and make target is named where a reader
  looks for it;
* every page of ``docs/`` is in ``mkdocs.yml``'s navigation, and every navigation entry is a
  page;
* the results pages say what was measured, not which issue asked for it.

Each check is a function of text, so each test also plants a failure and sees it found.
"""

import re
import subprocess
from pathlib import Path

from test_layering import ROOMS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
TOPS = ("hw", "sw", "sim")
README_MAX_LINES = 250

# Written in pieces, so this file does not match its own patterns.
OUTSIDE = re.compile("|".join([
    re.escape(".." + "/shared"),
    re.escape("/work" + "/shared"),
    "shared" + r"/(?:KERNELS|DESIGN|NUMBERS|STYLE|papers)",
    r"\bpapers" + r"/[\w.-]+\.txt",
    r"\b(?:KERNELS|DESIGN|NUMBERS)" + r"\.md\b",
]))
DOC_PATH = re.compile(r"\bdocs/[\w-][\w./-]*?\.md\b")
#: repository paths written in a page: hw/..., sw/..., sim/... (files or folders)
REPO_PATH = re.compile(r"(?<![\w./-])((?:hw|sw|sim)/(?:[\w-]+/)*[\w-]*(?:\.\w+)?)")


def read(path):
    return Path(path).read_text(encoding="utf-8")


def tracked(*tops):
    """Files git tracks under ``tops`` (every file there when git cannot say)."""
    try:
        out = subprocess.run(["git", "ls-files", "-z", *tops], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        files = [ROOT / f for f in out.split("\0") if f]
    except (OSError, subprocess.CalledProcessError):
        files = []
    return files or [p for top in tops for p in (ROOT / top).rglob("*") if p.is_file()]


# ------------------------------------------------------------------------------- README

def too_long(text, limit=README_MAX_LINES):
    """The line count of ``text`` if it is over ``limit``, else None."""
    n = len(text.splitlines())
    return n if n > limit else None


def test_readme_is_a_short_guide():
    assert too_long(read(ROOT / "README.md")) is None, (
        "README.md is over 250 lines: move the detail into docs/")
    assert too_long("line\n" * (README_MAX_LINES + 1)) == README_MAX_LINES + 1
    assert too_long("line\n" * README_MAX_LINES) is None


# ----------------------------------------------------------------- pointers in the code

def outside_pointers(text):
    """Every mention in ``text`` of a file outside the repository (the shared specs, papers)."""
    return [m.group(0) for m in OUTSIDE.finditer(text)]


def missing_doc_paths(text, root=ROOT):
    """Every ``docs/...md`` named in ``text`` that does not exist under ``root``."""
    return sorted({p for p in DOC_PATH.findall(text) if not (root / p).is_file()})


def code_files():
    return [p for p in tracked(*TOPS, "tests")
            if p.suffix in (".py", ".cpp", ".h", ".vlt", ".md", ".txt", ".cfg", ".toml")
            and p.is_file()]


def test_the_code_points_inside_the_repository():
    files = code_files()
    assert len(files) > 100, "found too few files to check"
    bad = {str(p.relative_to(ROOT)): outside_pointers(read(p)) for p in files}
    assert not {k: v for k, v in bad.items() if v}, (
        "files pointing outside the repository (cite docs/spec/... instead):\n"
        + "\n".join(f"{k}: {v}" for k, v in bad.items() if v))


def test_every_docs_path_the_code_names_exists():
    files = code_files()
    named = {p for f in files for p in DOC_PATH.findall(read(f))}
    assert {"docs/spec/kernels.md", "docs/spec/design.md"} <= named   # the checks see them
    bad = {str(f.relative_to(ROOT)): missing_doc_paths(read(f)) for f in files}
    assert not {k: v for k, v in bad.items() if v}, (
        "docs pages named in the code but missing:\n"
        + "\n".join(f"{k}: {v}" for k, v in bad.items() if v))


def test_the_pointer_checks_see_planted_failures():
    planted = ("see " + ".." + "/shared/" + "KERNELS" + ".md §1 and "
               + "papers" + "/ubep-sigcomm26.txt, or " + "DESIGN" + ".md")
    assert len(outside_pointers(planted)) == 4
    assert outside_pointers("docs/spec/kernels.md §1.6, UBEP §3.3") == []
    assert missing_doc_paths("docs/spec/kernels.md §1 and docs/spec/" + "nowhere.md") == [
        "docs/spec/" + "nowhere.md"]


# --------------------------------------------------------------------------- the house

def module_files():
    """Every module file of the package: ``hw/...``, ``sw/...``, ``sim/...``.

    What git tracks there (the ``.vlt``, ``.cpp`` and ``.h`` files too) and every ``.py``
    file on disk, as ``tests/test_layering.py`` sees them: a new module fails here until
    the page names it.
    """
    files = {p for p in tracked(*TOPS) if p.is_file() and p.suffix != ".pyc"}
    files |= {p for top in TOPS for p in (ROOT / top).rglob("*.py")}
    return sorted(str(p.relative_to(ROOT)) for p in files if "__pycache__" not in p.parts)


def layout_problems(text, rooms, files, root=ROOT):
    """What ``text`` (docs/layout.md) misses or names wrongly.

    A room is named as ``epfabric.ROOM`` in backquotes; a module file by its path (a
    package's ``__init__.py`` by its folder, ``sw/ubep/``); every ``hw/``, ``sw/`` or
    ``sim/`` path the page writes must exist.
    """
    problems = [f"room {room} not named" for room in rooms if f"`epfabric.{room}`" not in text]
    for f in files:
        shown = f[:-len("__init__.py")] if f.endswith("/__init__.py") else f
        if f"`{shown}`" not in text:
            problems.append(f"module {f} not named (as `{shown}`)")
    for path in sorted(set(REPO_PATH.findall(text))):
        if any(part.isupper() for part in re.split(r"[/.]", path)):
            continue                                  # a template: sw/kernels/NAME.py
        if not (root / path).exists():
            problems.append(f"names {path}, which does not exist")
    return problems


def test_layout_names_every_room_and_module_and_nothing_gone():
    rooms = [name for name, _job in ROOMS]
    files = module_files()
    assert "sw/buffer.py" in files and len(rooms) >= 10
    problems = layout_problems(read(DOCS / "layout.md"), rooms, files)
    assert not problems, "docs/layout.md is out of date:\n" + "\n".join(problems)


def test_the_layout_check_sees_planted_failures():
    text = "`epfabric.hw` `hw/` `hw/die.py`, `hw/NAME.py` and `sim/verilog/lint.vlt`"
    problems = layout_problems(text, ["hw", "sim.lab"], ["hw/__init__.py", "hw/die.py",
                                                         "hw/switch.py"])
    assert problems == ["room sim.lab not named", "module hw/switch.py not named (as `hw/switch.py`)",
                        "names sim/verilog/lint.vlt, which does not exist"]


# ------------------------------------------------------------ registries named in docs

def unnamed(names, text):
    """The names that ``text`` does not write in backquotes."""
    return sorted(n for n in names if f"`{n}`" not in text)


def make_targets(makefile):
    """Targets of the self-documenting Makefile: ``target: ... ## help`` lines."""
    return re.findall(r"^([a-z0-9-]+):.*?##", makefile, re.M)


def test_every_experiment_is_on_the_experiments_page():
    from epfabric.sim.lab.experiments import EXPERIMENTS
    assert len(EXPERIMENTS) > 10
    assert unnamed(EXPERIMENTS, read(DOCS / "experiments.md")) == []


def test_every_kernel_is_on_the_kernels_page():
    from epfabric.sw.kernels import KERNELS
    assert {"dispatch", "combine"} <= set(KERNELS)
    assert unnamed(KERNELS, read(DOCS / "kernels.md")) == []


def test_every_command_is_on_the_command_line_page():
    from epfabric.sim.cli import COMMANDS
    text = read(DOCS / "cli.md")
    names = [f"epfabric {name}" for name, _module, _help in COMMANDS]
    assert len(names) > 10
    assert [n for n in names if f"## `{n}`" not in text] == [], "a command without its section"


def test_every_make_target_is_in_the_readme():
    targets = make_targets(read(ROOT / "Makefile"))
    assert {"run", "test", "docs", "wheel-check"} <= set(targets)
    assert unnamed([f"make {t}" for t in targets], read(ROOT / "README.md")) == []


def test_the_registry_checks_see_planted_failures():
    assert unnamed(["fig6", "fig7"], "`fig6` and fig7 unquoted") == ["fig7"]
    makefile = "help: ## list\nrun: $(STAMP) ## the job\n\t$(PY) x\nplain:\n\techo\n"
    assert make_targets(makefile) == ["help", "run"]
    assert unnamed(["make help", "make run"], "| `make help` | list |") == ["make run"]


# ------------------------------------------------------------------------- navigation

def nav_pages(mkdocs_yml):
    """The ``.md`` pages listed under ``nav:`` in ``mkdocs_yml`` (the text)."""
    block = re.search(r"^nav:\n((?:[ \t]+.*\n?|\n)*)", mkdocs_yml, re.M)
    assert block, "mkdocs.yml has no nav"
    return re.findall(r"([\w./-]+\.md)\s*$", block.group(1), re.M)


def doc_pages(docs=DOCS):
    """Every Markdown page of the site (``docs/_ext`` holds build helpers, not pages)."""
    return sorted(str(p.relative_to(docs)) for p in docs.rglob("*.md")
                  if "_ext" not in p.relative_to(docs).parts)


def nav_problems(nav, pages):
    problems = [f"{p} is not in mkdocs.yml's nav" for p in pages if p not in nav]
    problems += [f"nav names {p}, which is not a page" for p in nav if p not in pages]
    problems += [f"nav lists {p} twice" for p in sorted(set(nav)) if nav.count(p) > 1]
    return problems


def test_every_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    nav, pages = nav_pages(read(ROOT / "mkdocs.yml")), doc_pages()
    assert "index.md" in pages and "spec/kernels.md" in pages and len(nav) > 10
    problems = nav_problems(nav, pages)
    assert not problems, "\n".join(problems)


def test_the_nav_check_sees_planted_failures():
    yml = ("site_name: x\nnav:\n  - Home: index.md\n  - API:\n      - api/index.md\n"
           "      - b: api/b.md\nplugins:\n  - search\n")
    nav = nav_pages(yml)
    assert nav == ["index.md", "api/index.md", "api/b.md"]
    assert nav_problems(nav, ["index.md", "api/index.md", "spare.md"]) == [
        "spare.md is not in mkdocs.yml's nav", "nav names api/b.md, which is not a page"]


# ---------------------------------------------------------------------- results pages

#: "issue 30", "Issue 29's", "issue\n30": a tracker's number, which a reader of the site cannot follow
ISSUE = re.compile(r"\bissues?\s+\d+", re.I)


def issue_references(text):
    """Every reference to a numbered issue in ``text``."""
    return ISSUE.findall(text)


def test_the_pages_name_no_issue():
    """The results pages, the guides and the README; design memos (docs/spec/) are dated
    documents of their own."""
    pages = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md")
                                         if p.relative_to(DOCS).parts[0] != "spec")]
    assert DOCS / "results" / "history.md" in pages and len(pages) >= 20
    bad = {str(p.relative_to(ROOT)): issue_references(read(p)) for p in pages}
    assert not {k: v for k, v in bad.items() if v}, (
        "pages citing issues (say what was measured or decided instead):\n"
        + "\n".join(f"{k}: {v}" for k, v in bad.items() if v))
    assert issue_references("### Issue 30: the calibration, issue\n29's list") == [
        "Issue 30", "issue\n29"]
    assert issue_references("32 × (2L + 3) + issue: the same; tissue 3") == []
