"""Who is calling: tenants, their API keys, the operator's grants to them, and their quotas.

Separate from the wire layer (which authenticates a request and hands the
protocol layer a `Caller`) and from storage (which takes an owner name).
"""
