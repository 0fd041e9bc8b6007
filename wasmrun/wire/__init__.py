"""The wire: JSON-RPC 2.0 envelopes over HTTP. Knows nothing of sandboxes."""
