"""Blob storage: opaque `blob:<id>` handles to bytes, shared with the sandbox."""
