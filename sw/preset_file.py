"""Machines described in a file: a preset as TOML, read field by field and written back.

A machine file holds one preset's fields (:class:`~epfabric.sw.presets.Preset`), each under
its field's name, which ends with its unit (``latency_two_hop_ns``, ``bandwidth_gbytes_s``)::

    based_on = "cm384"            # optional: start from a built-in preset
    latency_two_hop_ns = 1500     # a number in the unit of the name ...
    die_injection_gbytes_s = "256 GB/s"   # ... or a string that repeats the unit
    send_window_bytes = "none"    # an optional field unset

Every value is checked against its field's :class:`~epfabric.sw.param.Param` (type, unit,
range) and the machine as a whole by the preset itself; a bad file is refused with one line
that names the file, the field, its unit and its range. A file's preset is named by a
*reference*, ``/absolute/path.toml#DIGEST``, with the digest of its values
(:func:`digest`): any process resolves it (a simulator's, a sweep worker's), refusing a file
that has changed since, and everything keyed by a preset's name (a simulator build, a cached
result) is keyed by the machine's values. :func:`preset_toml` writes any preset in this
format, each field's help, unit and range as a comment; reading it back gives an equal preset.
"""

import difflib
import hashlib
import json
import os
import re
import sys
import textwrap
import typing
from dataclasses import fields
from pathlib import Path

from ..hw.validate import UserError, UserTypeError
from .param import params_of
from .presets import PRESETS, Preset

if sys.version_info >= (3, 11):
    import tomllib
else:                                   # Python 3.10: the same parser, as a package
    import tomli as tomllib

__all__ = ["SUFFIX", "is_preset_file", "read_preset", "preset_toml", "digest", "pinned",
           "loaded", "saved_preset"]

#: a preset reference naming a file ends with this (before its ``#DIGEST``)
SUFFIX = ".toml"
#: how an optional field is unset in a file (TOML has no null)
NONE = "none"
_DIGITS = 12
_REF = re.compile(rf"^(?P<path>.+{re.escape(SUFFIX)})(?:#(?P<digest>[0-9a-f]{{{_DIGITS}}}))?$")
_QUANTITY = re.compile(r"^\s*(?P<number>[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"
                       r"\s*(?P<unit>\S.*?)?\s*$")

#: file presets read by this process, by reference
_LOADED = {}


def is_preset_file(ref):
    """Whether ``ref`` names a machine file (a path ending in ``.toml``, maybe ``#DIGEST``)."""
    return isinstance(ref, (str, os.PathLike)) and bool(_REF.match(os.fspath(ref)))


def digest(preset):
    """12 hex digits of SHA-256 over every field of ``preset`` but its name: equal machines,
    equal digests, however their files are written."""
    values = {k: v for k, v in preset.describe().items() if k != "name"}
    return hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:_DIGITS]


def read_preset(ref):
    """The preset of machine file ``ref`` (a path, or a reference ``path#DIGEST``), named by its
    reference; ``UserError`` naming the file and the field on anything wrong."""
    text = os.fspath(ref)
    match = _REF.match(text)
    if not match:
        raise UserError(f"preset file {text}: a machine file's name ends in {SUFFIX}")
    if text in _LOADED:
        return _LOADED[text]
    path = Path(match["path"]).expanduser().resolve()
    preset = _parse(path)
    name = f"{path}#{digest(preset)}"
    if match["digest"] and match["digest"] != name[-_DIGITS:]:
        raise UserError(f"preset file {path} changed since it was read: its values' digest is "
                        f"{name[-_DIGITS:]}, not {match['digest']}")
    preset = _LOADED.setdefault(name, preset.replace(name=name))
    return preset


def saved_preset(preset, folder):
    """``preset`` (a changed copy of a named one, say) written as a machine file in ``folder``,
    the file named by its values' digest, and read back: a preset any process can name by its
    reference, which a machine configuration takes where it refuses a changed preset object."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    base = re.sub(r"[^A-Za-z0-9_.-]+", "_", Path(preset.name).name.split("#")[0])
    path = folder / f"{base}-{digest(preset)}{SUFFIX}"
    if not path.exists():
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(preset_toml(preset))
        os.replace(tmp, path)
    return read_preset(path)


def pinned(value):
    """A machine file's reference for ``value`` if it names one (its digest included), else
    ``value``: what a cache key holds, so another file's result is never taken for this one."""
    return read_preset(value).name if is_preset_file(value) else value


def loaded():
    """``{reference: {"path", "digest"}}`` of every machine file this process has read."""
    return {ref: {"path": ref[:-_DIGITS - 1], "digest": ref[-_DIGITS:]} for ref in _LOADED}


def _fields():
    """``{field: (Param, takes None)}`` of every field a file may set (all but ``name``)."""
    types = {f.name: f.type for f in fields(Preset)}
    return {p.name: (p, type(None) in typing.get_args(types[p.name]))
            for p in params_of(Preset) if p.name != "name"}


def _parse(path):
    where = f"preset file {path}"
    try:
        doc = tomllib.loads(path.read_bytes().decode("utf-8"))
    except OSError as exc:
        raise UserError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise UserError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UserError(f"{where}: not valid TOML: {exc}") from None
    known = _fields()
    base = doc.pop("based_on", None)
    if base is not None and (not isinstance(base, str) or base not in PRESETS):
        raise UserError(f"{where}: based_on must be a built-in preset ({', '.join(PRESETS)}), "
                        f"not {base!r}")
    values = {}
    for key, value in doc.items():
        if key == "name":
            raise UserError(f"{where}: name: a machine file is named by its path (say what it "
                            f"models in description)")
        if key not in known:
            raise UserError(f"{where}: unknown field {key!r}; {_valid(key, known)}")
        values[key] = _value(where, key, value, *known[key])
    if base is None and "topology" not in values:
        raise UserError(f"{where}: topology is required (or based_on = a built-in preset: "
                        f"{', '.join(PRESETS)})")
    if base is not None and "description" not in values:
        changed = ", ".join(f"{k} = {v!r}" for k, v in values.items())
        values["description"] = f"{base} with {changed or 'nothing changed'}"
    try:
        if base is None:
            return Preset(name=str(path), **values)
        return PRESETS[base].replace(name=str(path), **values)
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def _valid(key, known):
    close = difflib.get_close_matches(key, list(known) + ["based_on"], n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"fields: based_on, {', '.join(known)}"


def _value(where, key, value, declared, optional):
    """The field's value of TOML ``value``: a unit checked, ``"none"`` unset, an integer a
    float where the field is one; ``UserError`` naming the field, its unit and its range."""
    unit, expected = declared.unit, _expected(declared, optional)
    if isinstance(value, str) and value.strip().lower() == NONE:
        if not optional:
            raise UserError(f"{where}: {key} cannot be none; it takes {expected}")
        return None
    if isinstance(value, str) and declared.type in (int, float):
        quantity = _QUANTITY.match(value)
        if not quantity or not unit:
            raise UserError(f"{where}: {key} takes {expected}, not {value!r}")
        if quantity["unit"] != unit:
            raise UserError(f"{where}: {key} is in {unit}, not "
                            f"{quantity['unit'] or 'a bare string'}: {value!r}")
        number = quantity["number"].replace("_", "")
        value = int(number) if number.lstrip("+-").isdigit() else float(number)
    if declared.type is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    try:
        return declared.check(value)
    except UserTypeError:
        raise UserError(f"{where}: {key} takes {expected}, not {value!r}") from None
    except UserError as exc:
        raise UserError(f"{where}: {exc}") from None


def _expected(declared, optional):
    """What a field takes, in words: ``a number, in (0, 100000] ns, or "none"``."""
    kind = {int: "an integer", float: "a number", bool: "true or false",
            str: "a string"}[declared.type]
    if declared.choices:
        kind = f"one of {', '.join(map(str, declared.choices))}"
    if declared.type in (int, float) and (declared.minimum is not None
                                          or declared.maximum is not None or declared.positive):
        kind += f", {declared.range_text()}"
    return kind + (f", or \"{NONE}\"" if optional else "")


def preset_toml(preset):
    """``preset`` as a machine file: every field but ``name``, each after a comment with its
    help, unit and range; an unset optional field is ``"none"``. Read back, an equal preset."""
    name = preset.name
    # the name (a file's path) on the first line whole, never broken where it is long
    head, _, rest = f"{name}: {preset.description}".rstrip(": ").partition(" ")
    lines = textwrap.wrap(rest, 96, initial_indent=f"# {head} ", subsequent_indent="#   ",
                          break_long_words=False) or [f"# {head}"]
    lines += ["# A machine for epfabric: `epfabric run KERNEL --preset THIS.toml`. Each value is in",
              "# the unit its name ends with (a string may repeat it: \"218 ns\")."]
    if name in PRESETS:
        lines.append(f"# To change a few fields only, keep those lines and add: based_on = \"{name}\"")
    lines.append("")
    for key, (declared, optional) in _fields().items():
        value = getattr(preset, key)
        lines += textwrap.wrap(declared.help, 96, initial_indent="# ", subsequent_indent="# ")
        lines.append(f"# {_expected(declared, optional)}")
        lines.append(f"{key} = {_toml(NONE if value is None else value)}")
        lines.append("")
    return "\n".join(lines)


def _toml(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)      # a TOML basic string is a JSON string
