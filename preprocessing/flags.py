"""One declaration per flag: a dataclass field carries its flag's default, help, type, choices
and allowed range. The command lines are made from the fields: argparse for training's
entry points, Beam's PipelineOptions for the jobs (beam_jobs/shared/common_options.py), and
`check` applies the ranges, so a flag added is one field in one place."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterator, Optional, Sequence, Tuple

MISSING = dataclasses.MISSING


@dataclasses.dataclass(frozen=True)
class Flag:
    """A field's command-line side (dataclasses.Field.metadata["flag"])."""
    help: Optional[str] = None
    type: Optional[Callable] = None
    choices: Optional[Sequence] = None
    check: Optional[Tuple[Callable[[Any], bool], str]] = None  # (test, what it needs)
    aliases: Tuple[str, ...] = ()                                # e.g. ("-v",)
    argparse: Tuple[Tuple[str, Any], ...] = ()                   # action, nargs, const, ...


def flag(default: Any = None, help: Optional[str] = None, *, type: Optional[Callable] = None,
         choices: Optional[Sequence] = None, check: Optional[Tuple[Callable, str]] = None,
         aliases: Tuple[str, ...] = (), default_factory: Any = MISSING,
         **argparse_kwargs) -> Any:
    """A dataclass field that is also a flag `--<field name>`. `check`: (test, requirement),
    e.g. `(lambda v: v >= 1, ">= 1")`, applied to a value that is not None."""
    spec = Flag(help, type, tuple(choices) if choices is not None else None, check,
                tuple(aliases), tuple(sorted(argparse_kwargs.items())))
    if default_factory is not MISSING:
        return dataclasses.field(default_factory=default_factory, metadata={"flag": spec})
    return dataclasses.field(default=default, metadata={"flag": spec})


def at_least(low) -> Tuple[Callable, str]:
    return (lambda v: v >= low), f">= {low}"


def above(low) -> Tuple[Callable, str]:
    return (lambda v: v > low), f"> {low}"


def within(low, high) -> Tuple[Callable, str]:
    """low <= v <= high."""
    return (lambda v: low <= v <= high), f"in [{low}, {high}]"


def flag_fields(cls, own: bool = False) -> Iterator[dataclasses.Field]:
    """The flag fields of a dataclass, in declaration order (`own`: declared in `cls` itself,
    not inherited)."""
    mine = set(vars(cls).get("__annotations__", {})) if own else None
    for f in dataclasses.fields(cls):
        if "flag" in f.metadata and (mine is None or f.name in mine):
            yield f


def default_of(f: dataclasses.Field) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    return None


def add_arguments(parser, cls, own: bool = False) -> None:
    """`--name` for each flag field of `cls` on an argparse (or Beam) parser."""
    for f in flag_fields(cls, own):
        spec: Flag = f.metadata["flag"]
        kwargs = dict(spec.argparse)
        default = default_of(f)
        if default is not None and kwargs.get("action") != "append":  # append needs None
            kwargs["default"] = default
        kind = spec.type or (type(default) if type(default) in (int, float) else None)
        if kind is not None and "action" not in kwargs:
            kwargs["type"] = kind
        if spec.choices is not None:
            kwargs["choices"] = list(spec.choices)
        if spec.help is not None:
            kwargs["help"] = spec.help
        parser.add_argument(*spec.aliases, f"--{f.name}", **kwargs)


def problem(values) -> Optional[str]:
    """The first flag of a dataclass instance outside its choices or range, as a one-line
    message ("--gzip_level must be in [1, 9], got 0"), or None."""
    for f in flag_fields(type(values)):
        spec: Flag = f.metadata["flag"]
        value = getattr(values, f.name)
        if value is None:
            continue
        if spec.choices is not None and value not in spec.choices:
            return f"--{f.name} must be one of {', '.join(map(str, spec.choices))}, got {value!r}"
        if spec.check is None:
            continue
        test, needs = spec.check
        if not test(value):
            return f"--{f.name} must be {needs}, got {value!r}"
    return None


def from_mapping(cls, values: dict, **overrides):
    """An instance of `cls` from parsed values by field name (absent: the field's default)."""
    kwargs = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
    kwargs.update(overrides)
    return cls(**kwargs)
