"""Network egress by permission: what a run may reach, and the host-side client that reaches it.

    patterns.py   URL patterns as manifests and operators write them (`https://*.example.com`)
    addresses.py  which IP addresses are never public (loopback, private, metadata, ...)
    grants.py     who a grant in the operator's policy reaches (secrets and network alike:
                  grants follow ownership)
    policy.py     the operator's `[network]` configuration and each run's effective grant
    client.py     the host-side HTTP(S) client the guest's requests go through
    secrets.py    host-held secrets: placeholders in the guest, real values only on the wire
"""
