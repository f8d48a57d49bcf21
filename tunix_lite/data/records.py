"""Records from disk: the one reader every algorithm's data goes through.

    records = load_records("data/train.jsonl", key="train_data")    # -> datasets.Dataset

Accepted: a JSON-lines file (.jsonl, or .json holding one object per line), a .json file holding a
list of objects, a .csv file (a header row, every value a string), a .parquet file, or a directory
written by `datasets.Dataset.save_to_disk`. A `datasets.Dataset` or a list of dicts passes through
unchanged.

One side of the content split (`tunix_lite.data.questions`): `PATH?split=train` or `?split=test`
(`test_fraction`, 0.2 unless set, of the questions on the test side) keeps the records whose
question lies on that side, by a hash of the question alone; so a file's test side shares no
question with its train side, in any order and however the file grows:

    load_records("data/all.jsonl?split=test&test_fraction=0.1")

Bad input stops with one line naming the file and, for text files, the 1-based line: JSON the
parser rejects (with its message), bytes that are not UTF-8, a line that is not an object, a column
(or a field nested in one) whose type changes between records, a chat message whose content is not a
string, a CSV row with the wrong number of fields, and a file with no records at all.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from tunix_lite.data.questions import SPLITS, TEST_FRACTION, on_test_side, split_key

SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")


def load_records(source, *, key: str | None = None):
    """A `datasets.Dataset` of the records in `source` (a path, see the module docstring); anything
    that is not a str or Path is returned as it is. `key` (a config key such as "train_data") starts
    every error message."""
    if not isinstance(source, (str, Path)):
        return source
    where = f"{key}: " if key else ""
    try:
        file, side, test_fraction = split_source(str(source))
        records = _load(Path(file).expanduser())
        return records if side is None else _side(records, source, side, test_fraction)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"{where}{e}") from None
    except ValueError as e:
        raise ValueError(f"{where}{e}") from None


def split_source(source: str) -> tuple[str, str | None, float]:
    """(path, side, test_fraction) of `PATH[?split=train|test[&test_fraction=F]]`; side None: the
    whole file. A path that exists as written is a path, "?" and all. ValueError in one line naming
    the part and the fix."""
    try:
        if Path(source).expanduser().exists():
            return source, None, TEST_FRACTION
    except OSError:  # too long to be a file name
        pass
    file, query_mark, query = source.rpartition("?")
    if not query_mark:
        return source, None, TEST_FRACTION
    side, test_fraction = None, None
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key == "split" and value in SPLITS:
            side = value
        elif key == "split":
            raise ValueError(f"{source}: {part!r}: split must be train or test (the two sides of "
                             "the content split); write e.g. ?split=test")
        elif key == "test_fraction":
            try:
                test_fraction = float(value)
            except ValueError:
                test_fraction = -1.0
            if not 0 < test_fraction < 1:
                raise ValueError(f"{source}: {part!r}: test_fraction is the share of the "
                                 "questions on the test side, a number between 0 and 1 (both "
                                 "excluded); write e.g. test_fraction=0.2")
        else:
            raise ValueError(f"{source}: {part!r} is neither split=train|test nor "
                             "test_fraction=F; write e.g. PATH?split=test&test_fraction=0.2")
    if side is None:
        raise ValueError(f"{source}: the query names no side of the content split; add "
                         "split=train or split=test")
    return file, side, TEST_FRACTION if test_fraction is None else test_fraction


def _side(records, source: str, side: str, test_fraction: float):
    """The records whose question (`questions.split_key`) lies on `side` of the content split."""
    test = side == "test"
    try:
        keep = [i for i, record in enumerate(records)
                if on_test_side(split_key(record), test_fraction) == test]
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    if not keep:
        raise ValueError(f"{source}: none of the {len(records)} records' questions lies on the "
                         f"{side} side (test_fraction={test_fraction:g}); use a larger file or "
                         "change test_fraction")
    return records.select(keep)


def _load(path: Path):
    """The records of one file or saved dataset, checked (see the module docstring)."""
    import datasets

    if path.is_dir():
        return _load_saved_dataset(path)
    if not path.exists():
        raise FileNotFoundError(f"{path}: no such file or directory")
    if path.suffix == ".parquet":
        return _load_parquet(path)
    if path.suffix == ".csv":
        records, lines = _read_csv(path)
    elif path.suffix in (".json", ".jsonl"):
        records, lines = _read_json(path)
    else:
        raise ValueError(f"{path}: expected a {', '.join(SUFFIXES)} file or a datasets "
                         "directory (save_to_disk)")
    if not records:
        raise ValueError(f"{path}: no records (the file is empty)")
    _check_column_types(path, records, lines)
    return datasets.Dataset.from_list(records)


def _read_text(path: Path) -> str:
    """The file as text; bytes that are not UTF-8 are reported with their line and column
    (a BOM is allowed)."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line = data.count(b"\n", 0, e.start) + 1
        raise ValueError(f"{path} line {line}: bytes {data[e.start:e.end]!r} at column "
                         f"{e.start - line_start + 1} are not UTF-8; save the file as "
                         "UTF-8") from None


def _read_json(path: Path) -> tuple[list[dict], list[int]]:
    """(records, the 1-based line of each): a JSON list of objects (.json) or one object per
    line."""
    text = _read_text(path)
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} line {e.lineno}: not valid JSON ({e.msg}, "
                             f"column {e.colno})") from None
        records, lines = values, [None] * len(values)
        for i, record in enumerate(records):
            if not isinstance(record, dict):
                raise ValueError(f"{path}: item {i} of the list is {type(record).__name__}, "
                                 "expected an object ({\"prompt\": ..., ...})")
        return records, lines
    records, lines = [], []
    # split on "\n" only: str.splitlines would also break lines at U+2028, which JSON
    # strings may hold
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} line {number}: not valid JSON ({e.msg}, "
                             f"column {e.colno})") from None
        if not isinstance(record, dict):
            raise ValueError(f"{path} line {number}: expected a JSON object per line, "
                             f"got {type(record).__name__}")
        records.append(record)
        lines.append(number)
    return records, lines


def _read_csv(path: Path) -> tuple[list[dict], list[int]]:
    """(records, lines) of a CSV file with a header row; values stay strings ("42" is not turned
    into 42)."""
    reader = csv.reader(_read_text(path).splitlines(keepends=True))
    try:
        header = next(reader, None)
        if header is None:
            return [], []
        records, lines = [], []
        for row in reader:
            if not row:
                continue
            if len(row) != len(header):
                raise ValueError(f"{path} line {reader.line_num}: {len(row)} fields, the header "
                                 f"has {len(header)} ({', '.join(header)})")
            records.append(dict(zip(header, row)))
            lines.append(reader.line_num)
    except csv.Error as e:
        raise ValueError(f"{path} line {reader.line_num}: not valid CSV ({e})") from None
    return records, lines


def _check_column_types(path: Path, records: list[dict], lines: list[int | None]) -> None:
    """One line naming the first record whose value for a column, or for a field or item nested in
    one (such as 'messages[].content'), has another type than the first one there: datasets stores
    each as one typed column and would fail without naming the record. A chat message's content
    must be a string."""
    first: dict[str, tuple[type, int]] = {}
    for i, record in enumerate(records):
        for column, value in record.items():
            _check_messages(path, lines, i, column, value)
            for name, item in _nested(column, value):
                if item is None:
                    continue
                kind = float if type(item) is int else type(item)  # 1 and 1.5 may share a column
                if name not in first:
                    first[name] = (kind, i)
                elif first[name][0] is not kind:
                    then, j = first[name]
                    raise ValueError(f"{path} {_where(lines, i)}: {name!r} is {_kind(item)}, but "
                                     f"{_kind_name(then)} at {_where(lines, j)}; a column holds "
                                     "one type")


def _nested(name: str, value: Any):
    """(name, value) for the value and each list item ('name[]') and field ('name.key') in it."""
    yield name, value
    if isinstance(value, list):
        for item in value:
            yield from _nested(f"{name}[]", item)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _nested(f"{name}.{key}", item)


def _check_messages(path: Path, lines: list[int | None], i: int, column: str, value: Any) -> None:
    """A conversation's messages hold their text as a string: not a number, not a list of parts."""
    if not isinstance(value, list):
        return
    for j, message in enumerate(value):
        content = message.get("content") if isinstance(message, dict) else None
        if content is not None and not isinstance(content, str):
            fix = ("join the text parts into one string" if isinstance(content, list)
                   else "write the message's text as a string")
            raise ValueError(f"{path} {_where(lines, i)}: {column!r} message {j}: 'content' is "
                             f"{_kind(content)} ({content!r:.60}), not a string; {fix}")


def _where(lines: list[int | None], i: int) -> str:
    return f"line {lines[i]}" if lines[i] is not None else f"item {i}"


def _kind(value: Any) -> str:
    return _kind_name(float if type(value) is int else type(value))


def _kind_name(kind: type) -> str:
    return {str: "a string", float: "a number", bool: "true/false", list: "a list",
            dict: "an object"}.get(kind, kind.__name__)


def _load_saved_dataset(path: Path):
    import datasets

    if not any((path / name).is_file()
               for name in ("dataset_info.json", "state.json", "dataset_dict.json")):
        raise ValueError(f"{path}: a directory, but not one written by datasets' save_to_disk (no "
                         "dataset_info.json or dataset_dict.json); pass a data file or a saved "
                         "dataset")
    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        raise ValueError(f"{path}: holds the splits {', '.join(splits)}; name one of them, "
                         f"e.g. {path / splits[0]}")
    if len(loaded) == 0:
        raise ValueError(f"{path}: no records (the dataset is empty)")
    return loaded


def _load_parquet(path: Path):
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"{path}: not a readable parquet file ({e})") from None
    if table.num_rows == 0:
        raise ValueError(f"{path}: no records (the table is empty)")
    return datasets.Dataset(table)
