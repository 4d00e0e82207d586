"""Reading a schema spec file (JSON or YAML), bounded: a spec is a few KB, so a file over
MAX_SPEC_BYTES is not one, and YAML aliases (which can expand a few hundred bytes into
gigabytes, "billion laughs") are refused. Errors are ValueErrors whose text names the cause;
preprocessing.contract.schema turns them into SchemaErrors."""
from __future__ import annotations

import json

MAX_SPEC_BYTES = 1 << 20


def read_spec_text(path: str) -> str:
    """The text of the spec file at `path` (any Beam filesystem)."""
    from apache_beam.io.filesystems import FileSystems
    try:
        with FileSystems.open(path) as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
        text = raw.decode("utf-8")
    except Exception as e:
        raise ValueError(f"cannot read spec file {path}: {e}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise ValueError(f"spec file {path} is over {MAX_SPEC_BYTES >> 20} MiB")
    return text


def parse_spec_text(text: str, path_hint: str = ""):
    """A spec's document: YAML (by the `.yaml`/`.yml` name) without aliases, else JSON."""
    try:
        if path_hint.endswith((".yaml", ".yml")):
            return _load_yaml(text)
        return json.loads(text)
    except Exception as e:  # the parser's own message is the useful part
        raise ValueError(f"cannot parse spec {path_hint or ''}: {e}".strip()) from None


def _load_yaml(text: str):
    import yaml

    class NoAliases(yaml.SafeLoader):
        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                mark = self.peek_event().start_mark
                raise yaml.YAMLError(f"aliases (*name) are not allowed in a spec (line "
                                     f"{mark.line + 1})")
            return super().compose_node(parent, index)
    return yaml.load(text, Loader=NoAliases)
