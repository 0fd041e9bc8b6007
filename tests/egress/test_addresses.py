"""Address classification, tested on literals only: nothing here connects anywhere."""

from __future__ import annotations

import pytest

from wasmrun.egress.addresses import classify, embedded_ipv4, parse, refused_class


@pytest.mark.parametrize(
    "address, expected",
    [
        # IPv4
        ("127.0.0.1", "loopback"),
        ("127.255.255.254", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("100.64.0.1", "private"),  # carrier-grade NAT
        ("169.254.1.1", "link-local"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("100.100.100.200", "metadata"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("239.255.255.250", "multicast"),
        ("255.255.255.255", "reserved"),
        ("240.0.0.1", "reserved"),
        ("192.0.2.10", "reserved"),  # documentation
        ("198.18.0.1", "reserved"),  # benchmarking
        ("192.0.0.8", "reserved"),
        # IPv6
        ("::1", "loopback"),
        ("[::1]", "loopback"),
        ("::", "unspecified"),
        ("fe80::1", "link-local"),
        ("fe80::1%eth0", "link-local"),
        ("fc00::1", "private"),
        ("fd12:3456::1", "private"),
        ("fec0::1", "private"),  # site-local, deprecated
        ("fd00:ec2::254", "metadata"),
        ("ff02::1", "multicast"),
        ("2001:db8::1", "reserved"),
        ("2001::1", "reserved"),  # Teredo: a tunnel to an address we cannot check
        # IPv6 forms that carry an IPv4 address are judged by that address
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:7f00:1", "loopback"),
        ("::ffff:169.254.169.254", "metadata"),
        ("::ffff:10.0.0.1", "private"),
        ("::127.0.0.1", "loopback"),  # IPv4-compatible (deprecated)
        ("::10.0.0.1", "private"),
        ("::ffff:0:127.0.0.1", "loopback"),  # IPv4-translated
        ("64:ff9b::127.0.0.1", "loopback"),  # NAT64
        ("64:ff9b::a9fe:a9fe", "metadata"),  # NAT64 of 169.254.169.254
        ("64:ff9b:1::1", "private"),  # local-use NAT64
        ("2002:7f00:1::1", "loopback"),  # 6to4 of 127.0.0.1
        ("2002:a9fe:a9fe::1", "metadata"),  # 6to4 of 169.254.169.254
        ("2002:0a00:0001::", "private"),
        # not addresses at all
        ("localhost", "reserved"),
        ("", "reserved"),
        ("1.2.3.4.5", "reserved"),
    ],
)
def test_non_public_addresses(address: str, expected: str) -> None:
    assert classify(address) == expected


@pytest.mark.parametrize(
    "address",
    ["8.8.8.8", "1.1.1.1", "93.184.216.34", "2606:4700:4700::1111", "::ffff:8.8.8.8",
     "64:ff9b::808:808", "2002:808:808::1", "2a00:1450:4001::200e"],
)
def test_public_addresses(address: str) -> None:
    assert classify(address) is None


def test_embedded_ipv4_forms() -> None:
    v6 = parse("2002:c000:0204::1")
    assert v6 is not None and v6.version == 6
    assert str(embedded_ipv4(v6)) == "192.0.2.4"  # type: ignore[arg-type]
    assert parse("::1%lo") is not None and parse("not-an-ip") is None


def test_operator_may_open_only_loopback_private_and_link_local() -> None:
    for address in ("127.0.0.1", "::1", "10.0.0.1", "fd00::1", "169.254.1.1"):
        assert refused_class(address, allow_private=False) is not None
        assert refused_class(address, allow_private=True) is None
    for address in ("169.254.169.254", "fd00:ec2::254", "::ffff:169.254.169.254", "0.0.0.0", "::", "224.0.0.1"):
        assert refused_class(address, allow_private=True) is not None
    assert refused_class("8.8.8.8", allow_private=False) is None
