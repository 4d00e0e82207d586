"""Serving-time input parsing shared by the batch and streaming prediction jobs.

Raw inputs (CSV fields with a header, JSON objects, serialized raw tf.Example) become typed
value tuples in the schema's column order, validated by the same RowParser the preprocess job
uses, plus the requested passthrough values. Only what the model reads is required: the label,
the key and columns the model does not use may be absent. A CSV header must hold every column
the model reads, one with a default too; a JSON object may leave such a key out.
"""
from __future__ import annotations

from typing import Sequence, Tuple

from preprocessing.accounting import rejects
from preprocessing.contract.schema import Schema
from preprocessing.parsing import row_parser
from preprocessing.parsing.csv_records import delimiter_hint, header_below_hint, near_names_hint


class ServingParser:
    def __init__(self, schema: Schema, passthrough: Sequence[str] = ()):
        self.schema = schema
        self.names = tuple(schema.names)
        self.passthrough = list(passthrough)
        used = {c.name for c in schema.serving_columns()}
        self.optional = tuple(n for n in self.names if n not in used)
        self._used = tuple(n for n in self.names if n in used)
        self._parsers = {}
        self._wanted = self.names + tuple(c for c in self.passthrough if c not in self.names)

    def parser(self, header) -> row_parser.RowParser:
        p = self._parsers.get(header)
        if p is None:
            p = self._parsers[header] = row_parser.RowParser(self.schema, header, self.optional,
                                                             whole_columns=True)
        return p

    def parse_csv_block(self, header: tuple, fields_list):
        """Many CSV records at once (column-wise, see RowParser.parse_many): the ColumnBlock
        and, when passthrough columns were asked for, one passthrough dict per valid row."""
        parser = self.parser(header)
        block = parser.parse_many(fields_list)
        if not self.passthrough:
            return block, None
        pos = {h: i for i, h in enumerate(parser.header)}
        wanted = [(c, pos[c]) for c in self.passthrough if c in pos]
        return block, [{c: fields_list[i][j] for c, j in wanted} for i in block.index]

    def parse_object(self, obj) -> Tuple[tuple, dict]:
        if not isinstance(obj, dict):
            raise rejects.Reject("invalid_json", "an instance must be a JSON object")
        row_parser.refuse_near_names(self._used, obj, "the object lacks key(s)")
        values = self.parser(self.names).parse_dict(obj)
        return values, {c: obj.get(c) for c in self.passthrough if c in obj}

    def parse_example(self, data: bytes) -> Tuple[tuple, dict]:
        fields = dict(zip(self._wanted, row_parser.example_to_fields(data, self._wanted,
                                                                      self._used)))
        values = self.parser(self.names).parse([fields[n] for n in self.names])
        return values, {c: fields[c] for c in self.passthrough}


def csv_header_problem(schema: Schema, header: Sequence[str], passthrough: Sequence[str] = (),
                       asked: Sequence[str] = (), head: str = "", delimiter: str = ",") -> str:
    """What a CSV file with `header` lacks, in one line ("" when nothing): the columns the
    model reads (ServingParser's rule), then the `passthrough` and `asked` ones (an explicit
    key, a label to evaluate), each with the names the header has for them in another case
    or punctuation, and the line of the file's `head` that holds a model column (a title
    above the header)."""
    names = set(header)
    model = ServingParser(schema).parser(tuple(header)).missing_columns
    flags = [c for c in list(passthrough) + list(asked) if c and c not in names and
             c not in model]
    missing = model + flags
    if not missing:
        return ""
    what = "column(s) the model reads" if model else "column(s) asked for"
    if model and flags:
        what = "column(s) the model reads or asked for"
    shown = ", ".join(map(repr, missing[:8])) + (f" and {len(missing) - 8} more"
                                                 if len(missing) > 8 else "")
    below = header_below_hint(head, model[0], delimiter) if model and head else ""
    return (f"lacks {what} {shown}"
            f"{near_names_hint(missing, header)}{delimiter_hint(header)}{below}")
