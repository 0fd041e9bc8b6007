"""Which IP addresses a run must never reach, by default.

`classify(address)` names the class of a non-public address ("loopback",
"private", "metadata", ...) or returns None for a public one. It is a pure
function of the address: the client calls it on the address it is about to
connect to (after the host resolved the name), so a name that resolves to an
internal address, now or on a later lookup, is caught where it matters.

IPv6 forms that carry an IPv4 address (IPv4-mapped, IPv4-compatible,
IPv4-translated, NAT64, 6to4) are judged by the IPv4 address inside them:
`::ffff:127.0.0.1` is loopback.
"""

from __future__ import annotations

import ipaddress
from typing import Final

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA: Final = "metadata"
LOOPBACK: Final = "loopback"
PRIVATE: Final = "private"
LINK_LOCAL: Final = "link-local"
UNSPECIFIED: Final = "unspecified"
MULTICAST: Final = "multicast"
RESERVED: Final = "reserved"

# Classes an operator may open up for tests or an internal deployment
# (`allow_private_addresses`); the others stay closed whatever the configuration.
OPENABLE: Final = frozenset({LOOPBACK, PRIVATE, LINK_LOCAL})

_METADATA_ADDRESSES = frozenset({
    ipaddress.ip_address("169.254.169.254"),  # AWS, GCP, Azure, OpenStack, ...
    ipaddress.ip_address("169.254.170.2"),  # AWS ECS task metadata
    ipaddress.ip_address("169.254.170.23"),  # AWS EKS pod identity
    ipaddress.ip_address("100.100.100.200"),  # Alibaba Cloud
    ipaddress.ip_address("fd00:ec2::254"),  # AWS over IPv6
    ipaddress.ip_address("fd00:ec2::23"),  # AWS EKS pod identity over IPv6
})


Networks = tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]


def _nets(*cidrs: str) -> Networks:
    return tuple(ipaddress.ip_network(c) for c in cidrs)


_V4_CLASSES = (
    (UNSPECIFIED, _nets("0.0.0.0/8")),  # "this network"; 0.0.0.0 reaches the local host
    (LOOPBACK, _nets("127.0.0.0/8")),
    (PRIVATE, _nets("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10")),
    (LINK_LOCAL, _nets("169.254.0.0/16")),
    (MULTICAST, _nets("224.0.0.0/4")),
    (RESERVED, _nets(
        "192.0.0.0/24", "192.0.2.0/24", "192.88.99.0/24", "198.18.0.0/15",
        "198.51.100.0/24", "203.0.113.0/24", "240.0.0.0/4",  # 255.255.255.255 included
    )),
)

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_IPV4_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_V6_CLASSES = (
    (LINK_LOCAL, _nets("fe80::/10")),
    (PRIVATE, _nets("fc00::/7", "fec0::/10", "64:ff9b:1::/48")),  # unique-local, site-local, local NAT64
    (MULTICAST, _nets("ff00::/8")),
    (RESERVED, _nets("2001::/32", "2001:db8::/32", "100::/64", "2001:10::/28", "2001:20::/28", "3fff::/20")),
)


def parse(address: str) -> IPAddress | None:
    """An IP address literal (IPv6 with or without brackets or a zone), or None."""
    text = address.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    text = text.split("%", 1)[0]  # a zone id does not change what the address is
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address stands for, if it is one of the forms that carry one."""
    if address.ipv4_mapped is not None:  # ::ffff:a.b.c.d
        return address.ipv4_mapped
    value = int(address)
    if address in _IPV4_TRANSLATED:  # ::ffff:0:a.b.c.d
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _NAT64 and address not in _NAT64_LOCAL:  # 64:ff9b::a.b.c.d
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:  # 2002:AABB:CCDD::/48
        return ipaddress.IPv4Address((value >> 80) & 0xFFFFFFFF)
    if address in _IPV4_COMPATIBLE and value > 1:  # ::a.b.c.d (deprecated); :: and ::1 are not
        return ipaddress.IPv4Address(value & 0xFFFFFFFF)
    return None


def classify(address: IPAddress | str) -> str | None:
    """The class of a non-public address, or None if it is public.
    A string that is not an IP address is "reserved" (never connected to)."""
    ip = parse(address) if isinstance(address, str) else address
    if ip is None:
        return RESERVED
    if ip in _METADATA_ADDRESSES:
        return METADATA
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.is_unspecified:
            return UNSPECIFIED
        if ip.is_loopback:
            return LOOPBACK
        inner = embedded_ipv4(ip)
        if inner is not None:
            return classify(inner)
        found = _first_class(ip, _V6_CLASSES)
    else:
        found = _first_class(ip, _V4_CLASSES)
    if found is not None:
        return found
    # Anything else the IANA registries do not call globally reachable.
    return None if ip.is_global else RESERVED


def _first_class(ip: IPAddress, classes: tuple[tuple[str, Networks], ...]) -> str | None:
    for name, networks in classes:
        if any(ip in net for net in networks):
            return name
    return None


def refused_class(address: IPAddress | str, *, allow_private: bool) -> str | None:
    """The reason `address` may not be connected to, or None if it may."""
    found = classify(address)
    if found is None or (allow_private and found in OPENABLE):
        return None
    return found
