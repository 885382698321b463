"""What a run leaves behind: a summary to commit and review, and its raw samples beside it, not committed.

A run's record holds every sample of every contender (``samples_s``); the figures a report shows are medians,
quartiles and ratios computed from them when they were taken. :func:`write` splits the two:

* ``<out>/<stem>.json``: the summary, every record without its samples (numbers as measured: a summary renders
  the same tables as the run did), each list of like flat records (the same keys) as a table
  (``{"table": [column names], "rows": [[values], ...]}``) and each mapping of names to like flat records as a keyed
  table (``{"keyed": ["key", column names], "rows": [[name, values], ...]}``), one row a line, so that a rerun
  changes one line per figure. The report writers read this file (:func:`load` restores the records): the
  Markdown, the chart and the docs' sections are regenerated from it alone;
* ``<out>/raw/<stem>.json``: the whole record, samples included (``benchmarks/results/raw`` is in ``.gitignore``;
  keep it as a CI artifact where the samples matter).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SAMPLES = ("samples_s",)  # the keys of raw samples, left out of a summary
RAW = "raw"
_WIDTH = 120
_CELL = 100  # a table's cell is a scalar or a list or mapping at most this long in JSON


def summary(record: Any, omit: tuple[str, ...] = ()) -> Any:
  """``record`` without its samples (and without its top-level keys ``omit``)."""
  if isinstance(record, dict):
    return {key: summary(value) for key, value in record.items() if key not in SAMPLES and key not in omit}
  if isinstance(record, list | tuple):
    return [summary(value) for value in record]
  return record


def _like_flat_records(records: list[Any]) -> bool:
  """At least two mappings with the same keys, every value short enough for one cell of a row."""
  if len(records) < 2 or not all(isinstance(r, dict) and r for r in records):
    return False
  if len({tuple(r) for r in records}) != 1:
    return False
  return all(len(json.dumps(v)) <= _CELL for r in records for v in r.values())


def _tabulate(value: Any) -> Any:
  if isinstance(value, list) and _like_flat_records(value):
    columns = list(value[0])
    return {"table": columns, "rows": [[v[c] for c in columns] for v in value]}
  if isinstance(value, dict) and _like_flat_records(list(value.values())) and "key" not in next(iter(value.values())):
    columns = list(next(iter(value.values())))
    return {"keyed": ["key", *columns], "rows": [[k, *(v[c] for c in columns)] for k, v in value.items()]}
  if isinstance(value, dict):
    return {key: _tabulate(v) for key, v in value.items()}
  if isinstance(value, list):
    return [_tabulate(v) for v in value]
  return value


def _untabulate(value: Any) -> Any:
  if isinstance(value, dict) and set(value) == {"table", "rows"}:
    return [dict(zip(value["table"], row, strict=True)) for row in value["rows"]]
  if isinstance(value, dict) and set(value) == {"keyed", "rows"}:
    return {row[0]: dict(zip(value["keyed"][1:], row[1:], strict=True)) for row in value["rows"]}
  if isinstance(value, dict):
    return {key: _untabulate(v) for key, v in value.items()}
  if isinstance(value, list):
    return [_untabulate(v) for v in value]
  return value


def _dumps(value: Any, indent: int) -> str:
  """JSON laid out for review: short values on one line, a table one row a line, anything else a key a line."""
  flat = json.dumps(value, ensure_ascii=False)
  pad = " " * (indent + 1)
  head = next((key for key in ("table", "keyed") if isinstance(value, dict) and set(value) == {key, "rows"}), None)
  if head is not None:
    rows = ",\n".join(pad + " " + json.dumps(row, ensure_ascii=False) for row in value["rows"])
    return f'{{"{head}": {json.dumps(value[head], ensure_ascii=False)},\n{pad}"rows": [\n{rows}\n{pad}]}}'
  if indent + len(flat) <= _WIDTH or not isinstance(value, dict | list) or not value:
    return flat
  if isinstance(value, dict):
    items = [f"{pad}{json.dumps(key, ensure_ascii=False)}: {_dumps(v, indent + 1)}" for key, v in value.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
  items = [pad + _dumps(v, indent + 1) for v in value]
  return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def dumps(record: Any, omit: tuple[str, ...] = ()) -> str:
  """The summary of ``record`` (less its top-level keys ``omit``) as the text of its JSON file."""
  return _dumps(_tabulate(summary(record, omit)), 0) + "\n"


def loads(text: str) -> Any:
  """The records of a summary's text (tables back to lists of records)."""
  return _untabulate(json.loads(text))


def load(path: Path) -> Any:
  """The records of the summary at ``path``: what every report writer reads."""
  return loads(Path(path).read_text())


def write(record: Any, out: Path, stem: str, *, omit: tuple[str, ...] = ()) -> Any:
  """Writes ``record``'s summary to ``out/<stem>.json`` and the whole record to ``out/raw/<stem>.json``.

  ``omit``: top-level keys of the raw record only (per-sample records a summary's tables already condense).
  Returns the summary as :func:`load` reads it back, for the report writers.
  """
  out.mkdir(parents=True, exist_ok=True)
  (out / RAW).mkdir(exist_ok=True)
  (out / RAW / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
  text = dumps(record, omit)
  (out / f"{stem}.json").write_text(text)
  return loads(text)
