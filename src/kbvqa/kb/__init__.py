"""Knowledge-base store (SQLite + FTS5) and vector indexes."""
