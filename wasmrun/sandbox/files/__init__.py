"""The folders a run sees: its writable workspace and quota, each process's work roots, the disk
they count, the guest's read-only `/`, and the operator's package layer."""
