"""ragloop config: show the effective settings, make API keys."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import click

from ragloop.cli import config_option
from ragloop.cli.common import settings
from ragloop.config import new_key


@click.group(name="config")
def config_group() -> None:
    """Show the effective settings (ragloop.toml and the environment), make API keys."""


@config_group.command(name="show")
@config_option
@click.option("--json", "as_json", is_flag=True, help="Print the settings as JSON.")
def show(as_json: bool) -> None:
    """Print the effective settings, secrets masked: the file's values with the environment's
    overrides, and where they came from."""
    effective = settings()
    data = effective.masked()
    if as_json:
        click.echo(json.dumps(_json_safe(data), indent=2, ensure_ascii=False, allow_nan=False))
        return
    click.echo(f"# from: {effective.source or 'no config file (defaults)'}")
    if effective.overrides:
        click.echo(f"# environment: {', '.join(effective.overrides)}")
    click.echo(to_toml(data))


def _json_safe(value: Any) -> Any:
    """JSON has no infinity: a non-finite float is shown as TOML writes it (``"inf"``), which
    the settings read back."""
    if isinstance(value, float) and not math.isfinite(value):
        return _toml_value(value)
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


@config_group.command(name="new-key")
@click.argument("name")
@click.option(
    "--collection",
    "collections",
    multiple=True,
    help="A collection the key may read (repeatable; none: every collection).",
)
@click.option("--admin", is_flag=True, help="The key may also add and delete documents.")
def new_key_command(name: str, collections: tuple[str, ...], admin: bool) -> None:
    """Make an API key NAME: prints the key (shown once, give it to its user) and the lines
    to add to ragloop.toml, which keep only its hash."""
    if not name.replace("-", "").replace("_", "").isalnum():
        raise click.BadParameter("letters, digits, '-' and '_' only", param_hint="NAME")
    key, digest = new_key()
    entry: dict[str, Any] = {"hash": digest}
    if collections:
        entry["collections"] = list(collections)
    if admin:
        entry["admin"] = True
    click.echo(f"key: {key}", err=True)
    click.echo(f"[server.keys.{name}]\n" + to_toml(entry))


def to_toml(data: dict[str, Any], prefix: str = "") -> str:
    """Settings as TOML (``tomllib.loads`` reads them back): plain keys first, then one table
    per section; an unset key is a comment."""
    lines = [
        f"# {k}: unset" if v is None else f"{_toml_key(k)} = {_toml_value(v)}"
        for k, v in data.items()
        if not isinstance(v, dict)
    ]
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}{_toml_key(key)}"
            body = to_toml(value, f"{name}.")
            if any(not isinstance(v, dict) for v in value.values()) or not value:
                lines.append(f"\n[{name}]")
            lines.append(body)
    return "\n".join(line for line in lines if line)


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    """One TOML value: floats as TOML writes them (``inf``, ``-inf``, ``nan``), strings as
    basic strings (JSON's escapes are TOML's, DEL escaped too), lists element by element."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def _toml_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")
