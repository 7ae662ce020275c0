"""How the `mmrl` command prints data (`render`, `status -o yaml|json`): plain YAML or JSON a person can read and a
tool can parse, with no YAML anchors (`&id001` / `*id001`) where two objects share a value, and multi-line strings
(the trainer config, scripts) as literal blocks, as the pods will see them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import yaml

FORMATS = ("yaml", "json")


class PlainDumper(yaml.SafeDumper):
    """SafeDumper that writes every value out in full: a value shared by two objects is printed twice, not as an
    anchor and an alias that `kubectl apply` accepts but a reader has to resolve."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


PlainDumper.add_representer(str, _text)


def yaml_documents(objects: Iterable[Any]) -> str:
    """A multi-document YAML stream, each document starting with `---`."""
    return yaml.dump_all(list(objects), Dumper=PlainDumper, sort_keys=False, explicit_start=True)


def formatted(obj: Any, fmt: str) -> str:
    """One object as `-o yaml` or `-o json` prints it (kubectl's forms: JSON indented by 4, YAML without `---`)."""
    if fmt == "json":
        return json.dumps(obj, indent=4) + "\n"
    return yaml.dump(obj, Dumper=PlainDumper, sort_keys=False)
