"""The PostgreSQL backend: :class:`PostgresStore` (a psycopg pool), its ``tsvector`` search, migrations, pgvector.

Importing this package needs ``psycopg`` only when :class:`PostgresStore` is used (install the ``postgres`` extra).
Throwaway clusters for tests and benchmarks are ``memory_server.pg_cluster``, outside the storage room.
"""

from __future__ import annotations

from mycelian_agent.memory_server.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
