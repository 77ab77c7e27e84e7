"""One way to configure every entry point: a dataclass, a YAML file, and command-line overrides.

A config is a dataclass whose fields are declared with :func:`option` (a help string each); a field
whose type is itself a dataclass (e.g. :class:`~textwm.generation.settings.DecodeSettings`) is
flattened, so its fields are set as if they were the outer config's own. Values are resolved in
this order, each overriding the one before:

1. the dataclass defaults (or an environment variable named by ``option(env=...)``);
2. ``--config FILE.yaml``: a mapping of keys (field names; flattened fields by their own name, or
   nested under the outer field's name);
3. the command line: ``--flag VALUE`` (the field name with dashes) and ``key=value`` (YAML-typed).

:func:`config_dict` gives a config back as plain data (for the ``*_config.json`` / ``.yaml`` written next
to every output). This module is the bottom of the package: it imports nothing of textwm.

Every bad value raises one :class:`ConfigError` naming the key and where it came from (the YAML
file, the flag, the environment variable); unknown keys name the closest valid one. Validation
beyond types lives in each config's ``__post_init__``.

    @dataclass
    class EvalGenerateConfig:
        model_path: str = option("", "checkpoint folder")
        decode: DecodeSettings = option(help="decoding", default_factory=DecodeSettings)

    config = ConfigCLI(EvalGenerateConfig, prog="sdar/eval_generate.py").parse(argv)[0]
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import logging
import os
import re
import signal
import sys
import threading
import types
import typing
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any

import yaml

log = logging.getLogger(__name__)

#: Options of ``option(...)`` kept in a field's metadata.
_KEYS = ("help", "flag", "aliases", "choices", "env", "positional", "secret", "rename", "metavar")


class ConfigError(ValueError):
    """A bad config value; the message names the key, where it came from, and what to do."""

    def __init__(self, message: str, *, key: str | None = None, source: str | None = None):
        """``key``: the key or flag the message is about; ``source``: the file or variable it came from."""
        text = f"{key} {message}" if key else message
        if source and source != key:
            text = f"{source}: {text}"
        super().__init__(text)
        self.key, self.source = key, source


def option(default: Any = MISSING, help: str = "", *, default_factory: Any = MISSING, flag: str | None = None,
           aliases: Sequence[str] = (), choices: Sequence[Any] | None = None, env: str | None = None,
           positional: bool = False, secret: bool = False, rename: Mapping[str, str] | None = None,
           metavar: str | None = None, inner_aliases: Mapping[str, Sequence[str]] | None = None) -> Any:
    """A config field.

    Args:
        default / default_factory: as for :func:`dataclasses.field`.
        help: one line for ``--help``.
        flag: the command-line flag (default: ``--`` + the name with dashes).
        aliases: more flags for the same field (the paper's spellings).
        choices: the allowed values.
        env: an environment variable whose value, when set, is the default.
        positional: a positional argument instead of a flag.
        secret: left out of :func:`config_dict` (API keys).
        rename: for a nested dataclass, ``{inner field: outer key}`` (e.g. ``gen_length`` -> ``max_tokens``).
        inner_aliases: for a nested dataclass, ``{inner field: more flags}`` (e.g. ``gen_length`` ->
            ``--max-output-tokens``, the paper's spelling), added to the inner field's own aliases.
    """
    meta = {"help": help, "flag": flag, "aliases": tuple(aliases), "choices": tuple(choices) if choices else None,
            "env": env, "positional": positional, "secret": secret, "rename": dict(rename or {}), "metavar": metavar,
            "inner_aliases": {k: tuple(v) for k, v in (inner_aliases or {}).items()}}
    return dataclasses.field(default=default, default_factory=default_factory, metadata={"textwm": meta})


# --- the fields of a config, flattened -------------------------------------------------------------


@dataclass(frozen=True)
class Leaf:
    """One settable value of a config: its key, its place in the nested dataclasses, its type."""

    key: str
    path: tuple[str, ...]
    type: Any
    default: Any
    help: str = ""
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    choices: tuple[Any, ...] | None = None
    env: str | None = None
    positional: bool = False
    secret: bool = False
    metavar: str | None = None

    @property
    def flags(self) -> list[str]:
        return [self.flag or "--" + self.key.replace("_", "-"), *self.aliases]


def _meta(f: dataclasses.Field) -> dict[str, Any]:
    return dict(f.metadata.get("textwm") or {"help": f.metadata.get("help", "")})


def field_default(f: dataclasses.Field) -> Any:
    """A dataclass field's default (its factory called), or ``MISSING``."""
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return MISSING


def leaves(cls: type, *, prefix: tuple[str, ...] = (), rename: Mapping[str, str] | None = None,
           defaults: Any = None, inner_aliases: Mapping[str, Sequence[str]] | None = None) -> list[Leaf]:
    """The flattened fields of config class ``cls`` (nested dataclass fields replaced by theirs)."""
    known = {f.name for f in dataclasses.fields(cls)}
    stray = sorted(set(inner_aliases or {}) - known)
    if stray:
        raise TypeError(f"{cls.__name__}: inner_aliases name fields it does not have: {', '.join(stray)}")
    hints = typing.get_type_hints(cls)
    out: list[Leaf] = []
    for f in dataclasses.fields(cls):
        if not f.init or f.name.startswith("_") or f.metadata.get("internal"):
            continue  # ``field(metadata={"internal": True})``: set by code, not by users
        meta = _meta(f)
        tp = hints[f.name]
        default = getattr(defaults, f.name) if defaults is not None else field_default(f)
        if dataclasses.is_dataclass(tp):
            out += leaves(tp, prefix=(*prefix, f.name), rename=meta.get("rename"),
                          defaults=default if default is not MISSING else None,
                          inner_aliases=meta.get("inner_aliases"))
            continue
        key = (rename or {}).get(f.name, f.name)
        kwargs = {k: v for k, v in meta.items() if k in _KEYS and k != "rename"}
        kwargs["aliases"] = (*kwargs.get("aliases", ()), *(inner_aliases or {}).get(f.name, ()))
        out.append(Leaf(key=key, path=(*prefix, f.name), type=tp, default=default, **kwargs))
    keys = [leaf.key for leaf in out]
    dup = sorted({k for k in keys if keys.count(k) > 1})
    if dup and not prefix:
        raise TypeError(f"{cls.__name__}: flattened config keys collide: {', '.join(dup)} (use option(rename=...))")
    return out


# --- values ----------------------------------------------------------------------------------------


def _strip_optional(tp: Any) -> tuple[Any, bool]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, tp is Any


_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


def coerce(value: Any, tp: Any, *, key: str, source: str | None) -> Any:
    """``value`` (from YAML, a flag's text or an environment variable) as type ``tp``; ConfigError if it is not one.

    A ``source`` that is a flag (``--workers``) names the value in the message instead of ``key``.
    """
    if source and source.startswith("--"):
        key, source = source, None
    inner, optional = _strip_optional(tp)
    if value is None or (optional and isinstance(value, str) and value.strip().lower() in ("none", "null")):
        if optional or inner is Any:
            return None
        hint = " (an empty text is '\"\"', e.g. eval_file='\"\"')" if inner is str else ""
        raise ConfigError(f"must not be null (expected {_type_name(inner)}){hint}", key=key, source=source)
    if inner is Any:
        return value
    origin = typing.get_origin(inner)

    def bad(what: str) -> ConfigError:
        return ConfigError(f"must be {what}, got {value!r}", key=key, source=source)

    if inner is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise bad("true or false")
    if inner in (int, float):
        if isinstance(value, bool):
            raise bad("a number")
        try:
            number = float(value) if isinstance(value, str) else value  # YAML reads 1e-5 (no dot) as text
        except ValueError:
            raise bad("an integer" if inner is int else "a number") from None
        if not isinstance(number, (int, float)):
            raise bad("an integer" if inner is int else "a number")
        if inner is int:
            if isinstance(value, str) and value.strip().lstrip("+-").isdigit():
                return int(value)
            if float(number) != int(number):
                raise bad("an integer")
            return int(number)
        return float(number)
    if inner is str:
        if isinstance(value, (dict, list, tuple, bool)):
            raise bad("text")
        return str(value)
    if origin in (list, tuple, Sequence) or inner in (list, tuple):
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, (list, tuple)):
            raise bad("a list")
        args = typing.get_args(inner)
        item = args[0] if args else Any
        items = [coerce(v, item, key=key, source=source) for v in value]
        return tuple(items) if (origin is tuple or inner is tuple) else items
    if origin is dict or inner is dict:
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError as exc:
                raise bad(f"a JSON object ({exc})") from None
        if not isinstance(value, dict):
            raise bad("a mapping")
        return value
    return value


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def _check_choice(leaf: Leaf, value: Any, source: str | None) -> None:
    key = leaf.key
    if source and source.startswith("--"):
        key, source = source, None
    if leaf.choices and value is not None:
        for v in value if isinstance(value, (list, tuple)) else [value]:
            if v not in leaf.choices:
                raise ConfigError(f"must be one of {', '.join(map(str, leaf.choices))}, got {v!r}", key=key,
                                  source=source)


def _unknown(key: str, valid: Iterable[str], source: str | None) -> ConfigError:
    close = difflib.get_close_matches(key, list(valid), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return ConfigError(f"unknown config key {key!r}{hint}", source=source)


def read_yaml(path: str | os.PathLike) -> dict[str, Any]:
    """A YAML mapping from ``path``; ConfigError naming the file if it is missing, unreadable or not a mapping."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except FileNotFoundError:
        raise ConfigError("config file not found", source=str(path)) from None
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"invalid YAML: {exc}", source=str(path)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError("the config must be a mapping of keys to values", source=str(path))
    return data


def _flatten_input(cls: type, data: Mapping[str, Any], source: str | None) -> dict[str, Any]:
    """Keys of a YAML mapping as leaf keys: nested mappings under a dataclass field are opened."""
    by_path = {leaf.path: leaf.key for leaf in leaves(cls)}
    nested = {leaf.path[0] for leaf in leaves(cls) if len(leaf.path) > 1}
    out: dict[str, Any] = {}
    for key, value in data.items():
        key = str(key).replace("-", "_")
        if key in nested and isinstance(value, Mapping):
            for inner, v in value.items():
                path = (key, str(inner).replace("-", "_"))
                if path not in by_path:
                    raise _unknown(f"{key}.{inner}", [".".join(p) for p in by_path if len(p) > 1], source)
                out[by_path[path]] = v
        else:
            out[key] = value
    return out


def build(cls: type, values: Mapping[str, tuple[Any, str | None]]) -> Any:
    """An instance of ``cls`` from ``{leaf key: (value, source)}`` over the defaults (values already coerced)."""
    by_key = {leaf.key: leaf for leaf in leaves(cls)}

    def make(tp: type, path: tuple[str, ...], defaults: Any) -> Any:
        kwargs: dict[str, Any] = {}
        hints = typing.get_type_hints(tp)
        touched = False
        for f in dataclasses.fields(tp):
            if not f.init or f.name.startswith("_") or f.metadata.get("internal"):
                continue
            sub = (*path, f.name)
            if dataclasses.is_dataclass(hints[f.name]):
                default = getattr(defaults, f.name) if defaults is not None else field_default(f)
                value, changed = make(hints[f.name], sub, default if default is not MISSING else None)
                if changed:
                    kwargs[f.name], touched = value, True
                continue
            leaf = next((lf for lf in by_key.values() if lf.path == sub), None)
            if leaf is not None and leaf.key in values:
                kwargs[f.name], touched = values[leaf.key][0], True
            elif defaults is not None:
                kwargs[f.name] = getattr(defaults, f.name)
        if not touched and defaults is not None:
            return defaults, False
        try:
            return tp(**kwargs), True
        except ConfigError:
            raise
        except ValueError as exc:  # a __post_init__ check: its message names the field
            raise ConfigError(str(exc)) from None

    return make(cls, (), None)[0]


def load(cls: type, *, path: str | os.PathLike | None = None, overrides: Iterable[str] = (),
         values: Mapping[str, Any] | None = None, ignored_keys: Iterable[str] = ()) -> Any:
    """``cls`` from its defaults, a YAML file, ``key=value`` overrides and already-typed ``values`` (in that order).

    ``ignored_keys``: keys accepted and dropped with a warning (e.g. LlamaFactory keys that have no
    meaning here).
    """
    resolver = _Resolver(cls, ignored_keys)
    if path is not None:
        resolver.add_mapping(read_yaml(path), str(path))
    resolver.add_overrides(overrides)
    for key, value in (values or {}).items():
        resolver.set(key, value, None)
    return resolver.build()


class _Resolver:
    """Collects leaf values from the sources in order of precedence, coerced and checked as they come."""

    def __init__(self, cls: type, ignored_keys: Iterable[str] = ()):
        self.cls = cls
        self.by_key = {leaf.key: leaf for leaf in leaves(cls)}
        self.ignored = frozenset(ignored_keys)
        self.values: dict[str, tuple[Any, str | None]] = {}
        self._ignored_seen: set[str] = set()

    def set(self, key: str, value: Any, source: str | None) -> None:
        key = key.replace("-", "_")
        if key in self.ignored and key not in self.by_key:
            self._ignored_seen.add(key)
            return
        leaf = self.by_key.get(key)
        if leaf is None:
            raise _unknown(key, self.by_key, source)
        value = coerce(value, leaf.type, key=key, source=source)
        _check_choice(leaf, value, source)
        self.values[key] = (value, source)

    def add_env_defaults(self) -> None:
        for leaf in self.by_key.values():
            if leaf.env and os.environ.get(leaf.env, "").strip():
                self.set(leaf.key, os.environ[leaf.env].strip(), f"${leaf.env}")

    def add_mapping(self, data: Mapping[str, Any], source: str) -> None:
        for key, value in _flatten_input(self.cls, data, source).items():
            self.set(key, value, source)

    def add_overrides(self, overrides: Iterable[str]) -> None:
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise ConfigError(f"override {item!r} is not key=value")
            try:
                value = yaml.safe_load(text)  # YAML typing: 10 -> int, true -> bool, null -> None
            except yaml.YAMLError:
                value = text
            self.set(key.strip(), value, "override")

    def build(self) -> Any:
        if self._ignored_seen:
            log.warning("ignoring keys that do not apply here: %s", ", ".join(sorted(self._ignored_seen)))
        missing = [leaf for leaf in self.by_key.values() if leaf.default is MISSING and leaf.key not in self.values]
        if missing:
            names = ", ".join(leaf.key if leaf.positional else leaf.flags[0] for leaf in missing)
            raise ConfigError(f"required: {names}")
        return build(self.cls, self.values)


# --- the command line ------------------------------------------------------------------------------


class ConfigCLI:
    """An argparse command line for config class ``cls``: a flag per field, ``--config``, ``key=value``.

    ``add_argument`` adds arguments that are not config fields (``--fresh``, a sub-action); their values
    come back as the second item of :meth:`parse`.
    """

    def __init__(self, cls: type, *, prog: str | None = None, description: str | None = None,
                 epilog: str | None = None, ignored_keys: Iterable[str] = (), key_values: bool = True,
                 allow_abbrev: bool = True, recipes: bool = False):
        self.cls = cls
        self.ignored_keys = tuple(ignored_keys)
        self.key_values = key_values
        text = epilog or ("Values come from the defaults, then --config FILE.yaml (keys = the flag names with "
                          "underscores), then the command line" + (" (--flag VALUE or key=value)." if key_values
                                                                   else "."))
        self.parser = argparse.ArgumentParser(prog=prog, description=description, epilog=text, allow_abbrev=allow_abbrev,
                                              formatter_class=argparse.RawDescriptionHelpFormatter)
        self._extra: list[str] = []
        self.leaves = leaves(cls)
        for leaf in self.leaves:
            if leaf.positional:
                self._add_positional(leaf)
        self.parser.add_argument("--config", metavar="FILE.yaml", help="YAML file of values for the flags below")
        if recipes:
            self.parser.add_argument("--recipe", metavar="FILE.yaml",
                                     help="YAML file of a named run's values (recipes/<env>/<model>_<stage>.yaml): "
                                          "defaults that the environment variables, --config and the flags override")
        for leaf in self.leaves:
            if not leaf.positional:
                self._add_flag(leaf)
        if key_values:
            self.parser.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="set any key, YAML-typed")
        #: Flags followed by exactly one value: the token after one is that value, never a key=value.
        self._one_value = {flag for leaf in self.leaves if not leaf.positional and _takes_one_value(leaf)
                           for flag in leaf.flags}

    def add_argument(self, *args: Any, **kwargs: Any) -> None:
        action = self.parser.add_argument(*args, **kwargs)
        self._extra.append(action.dest)

    def _help(self, leaf: Leaf) -> str:
        default = leaf.default
        shown = "required" if default is MISSING else f"default: {_show(default)}"
        if leaf.choices and not leaf.positional:
            shown = f"one of: {', '.join(map(str, leaf.choices))}; {shown}"
        if leaf.env:
            shown += f"; ${leaf.env} when set"
        return f"{leaf.help} ({shown})".replace("%", "%%")

    def _add_positional(self, leaf: Leaf) -> None:
        kwargs: dict[str, Any] = {"help": self._help(leaf), "default": argparse.SUPPRESS}
        if leaf.choices:
            kwargs["choices"] = leaf.choices
        inner, _ = _strip_optional(leaf.type)
        if typing.get_origin(inner) in (list, tuple) or inner in (list, tuple):   # the rest of the positionals
            kwargs["nargs"] = "+" if leaf.default is MISSING else "*"
        elif leaf.default is not MISSING:
            kwargs["nargs"] = "?"
        self.parser.add_argument(leaf.key, **kwargs)

    def _add_flag(self, leaf: Leaf) -> None:
        inner, _ = _strip_optional(leaf.type)
        kwargs: dict[str, Any] = {"dest": leaf.key, "help": self._help(leaf), "default": argparse.SUPPRESS}
        if leaf.metavar:
            kwargs["metavar"] = leaf.metavar
        if inner is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif typing.get_origin(inner) in (list, tuple) or inner in (list, tuple):
            kwargs["nargs"] = "*"
        self.parser.add_argument(*leaf.flags, **kwargs)  # choices are checked by the resolver (a ConfigError)

    def parse(self, argv: Sequence[str] | None = None) -> tuple[Any, argparse.Namespace]:
        """The config and the non-config arguments. Raises ConfigError (argparse itself exits 2 on bad syntax)."""
        resolver, extra = self._resolve(argv)
        return resolver.build(), extra

    def parse_given(self, argv: Sequence[str] | None = None) -> tuple[dict[str, Any], argparse.Namespace]:
        """The values given (flags, ``--config``, ``key=value``, environment), checked and typed, by leaf key, without
        the defaults: for configs whose defaults depend on what was given (a ``create(**given)`` of presets)."""
        resolver, extra = self._resolve(argv)
        return {key: value for key, (value, _) in resolver.values.items()}, extra

    def _resolve(self, argv: Sequence[str] | None) -> tuple[_Resolver, argparse.Namespace]:
        exit_on_sigterm()
        argv, overrides = self._split_overrides(list(sys.argv[1:] if argv is None else argv))
        args = self.parser.parse_intermixed_args(argv)
        resolver = _Resolver(self.cls, self.ignored_keys)
        if getattr(args, "recipe", None):
            resolver.add_mapping(read_yaml(args.recipe), args.recipe)
        resolver.add_env_defaults()
        if args.config:
            resolver.add_mapping(read_yaml(args.config), args.config)
        resolver.add_overrides(overrides)
        for leaf in self.leaves:
            if hasattr(args, leaf.key):
                source = leaf.key if leaf.positional else leaf.flags[0]
                resolver.set(leaf.key, getattr(args, leaf.key), source)
        return resolver, argparse.Namespace(**{k: getattr(args, k) for k in self._extra})

    def parse_or_report(self, argv: Sequence[str] | None = None) -> tuple[Any, argparse.Namespace] | None:
        """:meth:`parse`, or None after printing ``error: <the ConfigError>`` (the caller exits with 2)."""
        try:
            return self.parse(argv)
        except ConfigError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return None

    def _split_overrides(self, argv: list[str]) -> tuple[list[str], list[str]]:
        """``key=value`` tokens out of ``argv`` (a list flag's values end at one; a flag's one value is not one)."""
        if not self.key_values:
            return argv, []
        rest, overrides = [], []
        for i, token in enumerate(argv):
            after_flag = i > 0 and argv[i - 1] in self._one_value | {"--config"}
            if not after_flag and _KEY_VALUE.match(token):
                overrides.append(token)
            else:
                rest.append(token)
        return rest, overrides


_KEY_VALUE = re.compile(r"^[A-Za-z_][\w.-]*=")


def _takes_one_value(leaf: Leaf) -> bool:
    inner, _ = _strip_optional(leaf.type)
    return inner is not bool and not (typing.get_origin(inner) in (list, tuple) or inner in (list, tuple))


def _show(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        return " ".join(map(str, value)) or "none"
    if value == "":
        return "''"
    return str(value)


# --- writing a config back -------------------------------------------------------------------------


def config_dict(config: Any) -> dict[str, Any]:
    """The config as plain data (nested dataclasses as mappings), secret fields left out."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(config):
        if _meta(f).get("secret") or f.name.startswith("_"):
            continue
        value = getattr(config, f.name)
        out[f.name] = config_dict(value) if dataclasses.is_dataclass(value) else _plain(value)
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- what every command line checks before its work -----------------------------------------------------


def _terminate(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def exit_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` (in the main thread), so that an interrupted atomic write removes its
    temporary file as it does on Ctrl-C (:func:`textwm.data.jsonl.atomic_write`)."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
