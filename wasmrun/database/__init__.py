"""The shared metadata backend: one PostgreSQL several servers use at once
(`--database-url`). Its modules need the `scale` extra (psycopg); this one
does not, so that callers can name its error without it."""


class DatabaseError(RuntimeError):
    """The database cannot be reached or used; the message names no secret."""
