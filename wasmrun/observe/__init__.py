"""What the server tells its operator about calls: the audit log and /metrics."""
