"""What a node's agent and `trainstack local`'s token service share: the token exchange's names
(Google's Security Token Service, RFC 8693) and who owns a loopback connection.

The agent downscopes the node's token for a job through the exchange and serves the job's
code its token only on connections of the job's user; the local stand-in of the service
answers the same exchange, and refuses the job's user, by the same kernel table.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

# RFC 8693's token exchange, as Google's STS takes it for a downscoped token
# (google-auth's google/auth/downscoped.py sends the same).
TOKEN_EXCHANGE_GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"  # noqa: S105 - a grant's name
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"  # noqa: S105 - a type's name


def socket_owner(client: tuple[str, int], proc_net: Path = Path("/proc/self/net")) -> int | None:
    """The uid that owns the TCP socket at ``client`` (a connection's far end, on this host's
    loopback), from the kernel's socket tables; None when no socket there is found."""
    address = ipaddress.ip_address(client[0])
    table = "tcp6" if address.version == 6 else "tcp"
    if address.version == 4:
        # /proc/net/tcp writes an IPv4 address as one little-endian 32-bit word in hex.
        wanted = f"{int.from_bytes(address.packed, 'little'):08X}:{client[1]:04X}"
    else:
        words = [int.from_bytes(address.packed[i : i + 4], "little") for i in range(0, 16, 4)]
        wanted = "".join(f"{w:08X}" for w in words) + f":{client[1]:04X}"
    try:
        lines = (proc_net / table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 7 and fields[1] == wanted:
            return int(fields[7])
    return None
