"""The PostgreSQL backend: :class:`PostgresStore` (a psycopg pool), its ``tsvector`` search, migrations, pgvector.

``cluster`` starts throwaway clusters for tests and benchmarks. Importing this package needs ``psycopg`` only when
:class:`PostgresStore` is used (install the ``postgres`` extra).
"""

from __future__ import annotations

from mycelian_agent.memory_server.storage.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
