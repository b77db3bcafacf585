"""MkDocs hook: let mkdocstrings (griffe) find ``epfabric.*`` in this checkout.

The package's folders are ``hw/``, ``sw/`` and ``sim/`` at the top of the
checkout, installed as ``epfabric.hw``, ``epfabric.sw`` and ``epfabric.sim``
by ``setup.py``'s ``package_dir``; there is no ``epfabric/`` folder for
griffe's static finder to see (and the editable install's finder maps only
the three sub-packages). Before anything is rendered this hook writes
``build/api-src/epfabric/{hw,sw,sim}`` as symbolic links to the three
folders; ``mkdocs.yml`` gives ``build/api-src`` to mkdocstrings as its search
path, so griffe reads ``epfabric`` there as a namespace package, statically,
from the checkout's sources (nothing is imported).
"""

import os
from pathlib import Path

from mkdocs.plugins import event_priority

TOPS = ("hw", "sw", "sim")


def source_tree(root):
    """``root/build/api-src``, with ``epfabric/<top>`` linked to ``root/<top>``; returns the path."""
    root = Path(root)
    base = root / "build" / "api-src"
    package = base / "epfabric"
    package.mkdir(parents=True, exist_ok=True)
    for top in TOPS:
        link = package / top
        target = os.path.relpath(root / top, package)
        if link.is_symlink() and os.readlink(link) == target:
            continue
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(target, target_is_directory=True)
    return base


@event_priority(100)            # before mkdocstrings resolves its search paths
def on_config(config):
    source_tree(Path(config.config_file_path).parent)
    return config
