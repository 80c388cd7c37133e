"""The append-only event log: persistence and export."""

from .store import SCHEMA_VERSION, SqliteStore, StoredRecord

__all__ = ["SCHEMA_VERSION", "SqliteStore", "StoredRecord"]
