"""Reading a spec file (a schema spec, a tuning spec: JSON or YAML), bounded: a spec is a few
KB, so a file over MAX_SPEC_BYTES is refused (never read in part), only a regular file is read
(a FIFO or a device would block or never end), YAML aliases (which can expand a few hundred
bytes into gigabytes, "billion laughs") are refused, and so is nesting deeper than MAX_DEPTH.
Errors are ValueErrors of one line whose text names the cause, with any control character
in a name escaped; the callers turn them into their own error types."""
from __future__ import annotations

import json
import os
import re
import stat

MAX_SPEC_BYTES = 1 << 20
MAX_DEPTH = 32  # mappings and lists inside each other; a real spec nests 4 deep


def one_line(text: str) -> str:
    """`text` with newlines and other control characters escaped (a name from a file printed
    raw made a one-line error span several lines)."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], str(text))


def read_spec_text(path: str) -> str:
    """The text of the spec file at `path` (any Beam filesystem)."""
    from apache_beam.io.filesystems import FileSystems
    if "://" not in path:  # a local file: what it is, before anything opens it
        try:
            st = os.stat(path)
        except OSError as e:
            raise ValueError(f"cannot read spec file {one_line(path)}: {e.strerror}") from None
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"spec file {one_line(path)} is not a regular file")
        if st.st_size > MAX_SPEC_BYTES:
            raise ValueError(f"spec file {one_line(path)} is {st.st_size:,} bytes, over "
                             f"{MAX_SPEC_BYTES >> 20} MiB")
    try:
        with FileSystems.open(path) as f:
            raw = f.read(MAX_SPEC_BYTES + 1)
    except Exception as e:
        raise ValueError(f"cannot read spec file {one_line(path)}: "
                         f"{one_line(str(e).splitlines()[0] if str(e) else e)[:300]}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise ValueError(f"spec file {one_line(path)} is over {MAX_SPEC_BYTES >> 20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"spec file {one_line(path)} is not UTF-8 (byte {e.start})") from None


def parse_spec_text(text: str, path_hint: str = "", yaml_always: bool = False):
    """A spec's document: YAML (by the `.yaml`/`.yml` name, or always: JSON is YAML) without
    aliases, else JSON; nested at most MAX_DEPTH deep."""
    try:
        if yaml_always or path_hint.endswith((".yaml", ".yml")):
            doc = _load_yaml(text)
        else:
            doc = json.loads(text)
    except RecursionError:
        doc = None
        deep = True
    except Exception as e:  # the parser's own message is the useful part
        raise ValueError(one_line(f"cannot parse spec {path_hint or ''}: "
                                  f"{str(e).splitlines()[0] if str(e) else e}".strip())[:500]) \
            from None
    else:
        deep = _depth(doc) > MAX_DEPTH
    if deep:
        raise ValueError(f"spec {one_line(path_hint)} is nested deeper than {MAX_DEPTH} "
                         "levels".replace("  ", " "))
    return doc


def load_spec_file(path: str, yaml_always: bool = False):
    """read_spec_text then parse_spec_text."""
    return parse_spec_text(read_spec_text(path), path, yaml_always)


def _depth(doc) -> int:
    """How deep mappings and lists nest (iteratively: no recursion to exhaust)."""
    deepest, stack = 0, [(doc, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict):
            children = list(node.keys()) + list(node.values())
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((c, depth + 1) for c in children)
    return deepest


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
