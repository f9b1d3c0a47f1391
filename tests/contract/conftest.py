"""Every store contract test runs on each store kind: SQLite (a file per test) and PostgreSQL
(a database per test, cloned from a template migrated once per session); the kinds and their
databases are ``tests/conftest.py``'s ``store_kind``, ``store_url`` and ``empty_url``."""

from tests.stores import store as store  # every store kind, over tests/conftest.py's SQLite one
