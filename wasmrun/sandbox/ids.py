import secrets


def new_run_id() -> str:
    """`run_` and 64 random bits: unique enough to name a run in logs and blobs."""
    return "run_" + secrets.token_hex(8)
