"""Shipped tuning tables (package data). The schema and the loader live in `dispatch.tables`;
tuning_db/README.md documents the YAML format. Nothing here reads files at import time."""

from __future__ import annotations

import pathlib

TABLE_DIR = pathlib.Path(__file__).resolve().parent


def table_paths() -> list[pathlib.Path]:
    """Every shipped table, sorted by name (the order has no meaning: keys live inside the files)."""
    return sorted(TABLE_DIR.glob("*.yaml"))
