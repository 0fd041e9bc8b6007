"""Sessions' storage: who owns which session, their lifetime, caps and folders on disk
(store.py, the local store); the shared one, in PostgreSQL and the object store, is
database/sessions.py. Beside blobs/ and registry/, below protocol/: the session methods
(protocol/sessions.py) and the backends (backends.py) use it, it uses neither."""
