"""ragloop config: show the effective settings, make API keys."""

from __future__ import annotations

import json
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
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
        return
    click.echo(f"# from: {effective.source or 'no config file (defaults)'}")
    if effective.overrides:
        click.echo(f"# environment: {', '.join(effective.overrides)}")
    click.echo(to_toml(data))


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
    """Settings as TOML: plain keys first, then one table per section."""
    lines = [
        f"# {k}: unset" if v is None else f"{k} = {json.dumps(v, ensure_ascii=False)}"
        for k, v in data.items()
        if not isinstance(v, dict)
    ]
    for key, value in data.items():
        if isinstance(value, dict):
            name = f"{prefix}{key}"
            body = to_toml(value, f"{name}.")
            if any(not isinstance(v, dict) for v in value.values()) or not value:
                lines.append(f"\n[{name}]")
            lines.append(body)
    return "\n".join(line for line in lines if line)
