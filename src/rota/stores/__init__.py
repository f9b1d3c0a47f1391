"""Stores: adapters of the :class:`~rota.core.ports.Store` port (SQLite and PostgreSQL through
one SQLAlchemy Core implementation, :class:`rota.stores.sql.SqlStore`)."""
