"""Verifies the DKIM signature of a message with dkimpy, an implementation
independent of the service's (Rust, mail-auth). The public key is fetched
by dnspython from the test's DNS server on loopback.

usage: verify.py MESSAGE_FILE DNS_PORT
exit 0: the signature verifies; 1: it does not; 2: usage or setup error.
"""

import sys

import dkim
import dns.resolver


def main() -> int:
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    message = open(sys.argv[1], "rb").read()
    resolver = dns.resolver.Resolver(configure=False)
    resolver.nameservers = ["127.0.0.1"]
    resolver.port = int(sys.argv[2])
    resolver.cache = None

    def dnsfunc(name, timeout=5):
        name = name.decode() if isinstance(name, bytes) else name
        answer = resolver.resolve(name, "TXT", lifetime=timeout)
        # One TXT record; its character strings joined, as dkimpy expects.
        return b"".join(answer[0].strings)

    ok = dkim.verify(message, dnsfunc=dnsfunc)
    print("pass" if ok else "fail")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
