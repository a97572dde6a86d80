"""Verifies the DKIM signature of messages with dkimpy, an implementation
independent of the service's (Rust, mail-auth). The public key is fetched
by dnspython from the test's DNS server on loopback.

usage: verify.py MESSAGE_FILE [MESSAGE_FILE ...] DNS_PORT
Prints `pass` or `fail` per message, in order.
exit 0: every signature verifies; 1: one does not; 2: usage or setup error.
"""

import sys

import dkim
import dns.resolver


def main() -> int:
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = int(sys.argv[-1])
    resolver.cache = None

    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        answer = resolver.resolve(name, "TXT", lifetime=timeout)
        # One TXT record; its character strings joined, as dkimpy expects.
        return b"".join(answer[0].strings)

    every = True
    for path in sys.argv[1:-1]:
        ok = dkim.verify(open(path, "rb").read(), dnsfunc=dnsfunc)
        print("pass" if ok else "fail")
        every = every and ok
    return 0 if every else 1


if __name__ == "__main__":
    sys.exit(main())
