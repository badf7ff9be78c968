"""The queue's state: one SQLite database per TRAINWIZ_HOME (``queue.db``), WAL mode.

Why SQLite and not a JSON file: the queue is written by several processes at once (two
``trainwiz queue add`` racing, the scheduler claiming an item while the user removes it), and it
must survive a ``kill -9`` or a power cut at any moment. SQLite gives both: every change is one
transaction (``BEGIN IMMEDIATE``: the writer holds the lock from the first read, so "read the
last position, insert after it" cannot interleave), WAL lets the readers (``trainwiz queue``,
the wizard) read while the scheduler writes, and ``synchronous=FULL`` makes a committed
transaction durable before COMMIT returns. A reader never sees half an item.

The item's token (``q<id>.<nonce>``) is what links it to its run: the launched preset's name
ends with it, so the run's status.json names the item from the moment the run directory exists
(``backend.queue.recover``). The nonce is drawn once per database, so the tokens of a queue.db
that was deleted and made again never match an older run.
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend import paths
from backend.errors import BadInput
from backend.i18n import _

QUEUE_DB = "queue.db"
QUEUE_DIR = "queue"  # the items' preset copies and launcher logs
SWEEPS_DIR = "sweeps"
ACTIVE = ("starting", "running")
FINAL = ("finished", "failed", "stopped", "removed")
STATES = ("queued", *ACTIVE, *FINAL)
BUSY_TIMEOUT_S = 30.0  # a writer waits this long for another's transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    position INTEGER NOT NULL,
    preset_name TEXT NOT NULL,
    preset_file TEXT NOT NULL,
    cwd TEXT NOT NULL,
    device TEXT NOT NULL,
    gpus TEXT,
    ngpus INTEGER NOT NULL DEFAULT 0,
    share INTEGER NOT NULL DEFAULT 0,
    after TEXT,
    ignore_plan INTEGER NOT NULL DEFAULT 0,
    need_bytes INTEGER,
    state TEXT NOT NULL DEFAULT 'queued',
    token TEXT NOT NULL DEFAULT '',
    run_id TEXT,
    assigned TEXT,
    launches INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    diagnosis_category TEXT,
    diagnosis_title TEXT,
    sweep_id TEXT,
    label TEXT,
    overrides TEXT,
    added_at REAL NOT NULL,
    started_at REAL,
    ended_at REAL,
    scheduler TEXT NOT NULL DEFAULT 'local'
);
CREATE TABLE IF NOT EXISTS sweeps (
    id TEXT PRIMARY KEY,
    base TEXT NOT NULL,
    metric TEXT NOT NULL,
    rank_by TEXT NOT NULL,
    dir TEXT NOT NULL,
    created_at REAL NOT NULL,
    notified_at REAL
);
"""

# Columns added after the first queue.db, with their definition: ``connect`` adds any a database
# lacks (an older trainwiz made it), so it still opens, its rows taking the default.
ADDED_COLUMNS = {"items": {"scheduler": "TEXT NOT NULL DEFAULT 'local'"}}


@dataclass
class Item:
    """One queued preset and what became of it (a row of ``items``)."""

    id: int
    position: int
    preset_name: str  # as the user named it (the launched copy adds the token)
    preset_file: str  # the item's own copy, whose name ends with the token
    cwd: str  # where the user queued it: relative paths in the preset are from here
    device: str  # "cpu" or "cuda"
    gpus: list[int] | None  # the GPUs asked for (None: any free ones)
    ngpus: int  # GPUs it needs (launch.nproc_per_node of a CUDA preset)
    share: bool  # may share its GPUs with other runs (--share)
    after: str | None  # "item:<id>" or "run:<run id>": wait until that one ended
    ignore_plan: bool
    need_bytes: int | None  # the plan's peak per GPU (None: not knowable here)
    state: str
    token: str
    run_id: str | None
    assigned: list[int] | None  # the GPUs it was started on
    launches: int
    message: str
    diagnosis_category: str | None
    diagnosis_title: str | None
    sweep_id: str | None
    label: str | None  # a sweep variant's values, as one line
    overrides: dict[str, str] | None  # a sweep variant's values: dotted path -> value as typed
    added_at: float
    started_at: float | None
    ended_at: float | None
    # How it runs: "local" (started here when its GPUs or a CPU slot are free) or "slurm"
    # (handed to sbatch at once: Slurm queues it and assigns its nodes and GPUs).
    scheduler: str = "local"

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Item:
        known = {f.name for f in dataclasses.fields(cls)}  # a newer trainwiz's column is not ours
        data = {key: value for key, value in dict(row).items() if key in known}
        for key in ("gpus", "assigned", "overrides"):
            data[key] = json.loads(data[key]) if data[key] else None
        for key in ("share", "ignore_plan"):
            data[key] = bool(data[key])
        return cls(**data)

    @property
    def final(self) -> bool:
        return self.state in FINAL


def db_path() -> Path:
    return paths.home() / QUEUE_DB


def queue_dir() -> Path:
    return paths.home() / QUEUE_DIR


def sweeps_dir() -> Path:
    return paths.home() / SWEEPS_DIR


def connect() -> sqlite3.Connection:
    """A connection to this home's queue.db (made on first use, 0600), in autocommit mode:
    every change goes through ``transaction``."""
    home = paths.home()
    try:
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise BadInput(
            _("TRAINWIZ_HOME: cannot make {root} ({why}): point TRAINWIZ_HOME at a folder of yours")
            .format(root=home, why=exc.strerror or type(exc).__name__)
        ) from exc  # fmt: skip
    path = db_path()
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)  # created private, before SQLite opens it
    os.close(fd)
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")  # a committed claim survives a power cut
    with transaction(conn):
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        _add_missing_columns(conn)
        conn.execute("INSERT OR IGNORE INTO meta VALUES ('nonce', ?)", (secrets.token_hex(2),))
    return conn


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    """A queue.db made by an older trainwiz lacks the columns added since (``CREATE TABLE IF
    NOT EXISTS`` keeps its table as it was): add them, so its items still open (as local ones).
    Inside ``connect``'s transaction, so two processes never both add one."""
    for table, columns in ADDED_COLUMNS.items():
        have = {row["name"] for row in conn.execute(f"PRAGMA table_info({table})")}
        for name, definition in columns.items():
            if name not in have:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {name} {definition}")


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, the lock taken at its start (``BEGIN IMMEDIATE``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def get_meta(conn: sqlite3.Connection, key: str, default: str) -> str:
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return str(row["value"]) if row else default


def set_meta(conn: sqlite3.Connection, key: str, value: str) -> None:
    conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def paused(conn: sqlite3.Connection) -> bool:
    return get_meta(conn, "paused", "0") == "1"


def max_parallel(conn: sqlite3.Connection) -> int:
    return int(get_meta(conn, "max_parallel", "1"))


def items(conn: sqlite3.Connection, *, with_removed: bool = False) -> list[Item]:
    """The items in queue order (``position``), removed ones left out unless asked for."""
    where = "" if with_removed else "WHERE state != 'removed'"
    rows = conn.execute(f"SELECT * FROM items {where} ORDER BY position, id").fetchall()
    return [Item.from_row(row) for row in rows]


def item(conn: sqlite3.Connection, item_id: int) -> Item | None:
    row = conn.execute("SELECT * FROM items WHERE id = ?", (item_id,)).fetchone()
    return Item.from_row(row) if row else None


def insert_item(conn: sqlite3.Connection, **fields: Any) -> Item:
    """Append an item (inside the caller's transaction): the next position, its token from the
    id and this database's nonce. ``preset_file`` may be written after, by the id."""
    top = conn.execute("SELECT COALESCE(MAX(position), 0) AS top FROM items").fetchone()["top"]
    for key in ("gpus", "assigned", "overrides"):
        if fields.get(key) is not None:
            fields[key] = json.dumps(fields[key])
    fields.update(position=int(top) + 1, added_at=time.time())
    names = ", ".join(fields)
    marks = ", ".join("?" for _name in fields)
    cursor = conn.execute(f"INSERT INTO items ({names}) VALUES ({marks})", tuple(fields.values()))
    item_id = int(cursor.lastrowid or 0)
    token = f"q{item_id}.{get_meta(conn, 'nonce', '0000')}"
    conn.execute("UPDATE items SET token = ? WHERE id = ?", (token, item_id))
    found = item(conn, item_id)
    assert found is not None
    return found


def update_item(conn: sqlite3.Connection, item_id: int, *, where_state: str | None = None,
                **fields: Any) -> bool:  # fmt: skip
    """Change an item; with ``where_state`` only while it is in that state (a claim). True when
    a row changed."""
    for key in ("gpus", "assigned"):
        if key in fields and fields[key] is not None:
            fields[key] = json.dumps(fields[key])
    sets = ", ".join(f"{name} = ?" for name in fields)
    sql = f"UPDATE items SET {sets} WHERE id = ?"
    args: tuple[Any, ...] = (*fields.values(), item_id)
    if where_state is not None:
        sql += " AND state = ?"
        args = (*args, where_state)
    return conn.execute(sql, args).rowcount > 0


def parse_item_id(text: str) -> int:
    """``7``, ``q7`` or a token ``q7.ab12``: the item id; BadInput otherwise."""
    word = text.strip().lower().removeprefix("q").split(".", 1)[0]
    if not word.isdigit() or len(word) > 12:
        raise BadInput(
            _("queue item '{text}': not an item id (see 'trainwiz queue')").format(text=text[:40])
        )
    return int(word)
