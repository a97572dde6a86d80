"""The official MCP Python SDK's OAuth client against host-sim, headless.

Run by tests/mcp_oauth.rs with HOST_SIM_BASE (the server), HOST_SIM_PERSON_TOKEN
(the test user's console sign-in) and HOST_SIM_PROJECT. The SDK's
`OAuthClientProvider` does everything an MCP client does: the 401 on /mcp,
resource and authorization server metadata, Dynamic Client Registration, PKCE,
`state` and `iss`, the token exchange and the refresh. The "person" is its
redirect handler: it signs in to the console as the test user and approves the
consent form over HTTP. The last line printed is a JSON report.
"""

import asyncio
import json
import os
import re
import socket
import time
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

BASE = os.environ["HOST_SIM_BASE"]
PERSON = os.environ["HOST_SIM_PERSON_TOKEN"]
PROJECT = os.environ["HOST_SIM_PROJECT"]
REDIRECT_URI = "http://127.0.0.1:9/callback"
STATS = "plugin__managed_analytics__stats"
PROVISION = "plugin__managed_analytics__provision"


class Memory(TokenStorage):
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Person:
    """The browser side: sign in to the console, approve, hand back the redirect."""

    def __init__(self, redirect_uri: str = REDIRECT_URI) -> None:
        self.redirect_uri = redirect_uri
        self.location: str | None = None
        self.authorizations = 0

    async def redirect(self, authorization_url: str) -> None:
        self.authorizations += 1
        url = urlparse(authorization_url)
        assert f"{url.scheme}://{url.netloc}" == BASE, authorization_url
        next_path = f"{url.path}?{url.query}"
        origin = {"Origin": BASE}
        async with httpx2.AsyncClient(follow_redirects=False) as web:
            page = await web.get(authorization_url)
            assert page.status_code == 200 and 'name="next"' in page.text, page.text
            signed = await web.post(
                f"{BASE}/console/sign-in", data={"token": PERSON, "next": next_path}, headers=origin
            )
            assert signed.status_code == 303, signed.text
            assert signed.headers["location"] == next_path
            cookie = {"Cookie": signed.headers["set-cookie"].split(";")[0]}
            consent = await web.get(f"{BASE}{next_path}", headers=cookie)
            assert consent.status_code == 200, consent.text
            shown = urlparse(self.redirect_uri).netloc
            assert "MCP Python SDK test" in consent.text and shown in consent.text, consent.text
            request = re.search(r'name="request" value="([0-9a-f]+)"', consent.text).group(1)
            decided = await web.post(
                f"{BASE}/console/authorize",
                data={
                    "request": request,
                    "project": PROJECT,
                    "scope": ["read", "write"],
                    "decision": "approve",
                },
                headers={**cookie, **origin},
            )
            assert decided.status_code == 303, decided.text
            self.location = decided.headers["location"]

    async def callback(self) -> AuthorizationCodeResult:
        assert self.location and self.location.startswith(self.redirect_uri), self.location
        answer = parse_qs(urlparse(self.location).query)
        first = lambda name: answer.get(name, [None])[0]  # noqa: E731
        return AuthorizationCodeResult(code=first("code"), state=first("state"), iss=first("iss"))


def free_port() -> int:
    """A port nothing listens on now, as a native client picks at start."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def provider(storage: Memory, person: Person) -> OAuthClientProvider:
    """The SDK's OAuth client, redirecting to the person's redirect URI."""
    return OAuthClientProvider(
        server_url=f"{BASE}/mcp",
        client_metadata=OAuthClientMetadata(
            client_name="MCP Python SDK test",
            redirect_uris=[person.redirect_uri],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="client_secret_post",
            scope="read write",
        ),
        storage=storage,
        redirect_handler=person.redirect,
        callback_handler=person.callback,
    )


async def connect_on_another_port(client: OAuthClientInformationFull) -> None:
    """A later start of the same native client: registered with port 9, it
    now listens on a free port and sends that redirect URI (RFC 8252 §7.3).
    It must authorize, list tools and call stats on one connection."""
    storage = Memory()
    storage.client = client
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    person = Person(redirect_uri)
    oauth = provider(storage, person)
    async with create_mcp_http_client(auth=oauth) as http:
        async with Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as mcp:
            tools = [tool.name for tool in (await mcp.list_tools()).tools]
            assert STATS in tools, tools
            now = int(time.time() * 1000)
            week = {"project_id": PROJECT, "start_at": now - 86_400_000, "end_at": now}
            stats = await mcp.call_tool(STATS, week)
            assert not stats.is_error, stats
    assert person.authorizations == 1, person.authorizations
    assert storage.client is not None and storage.client.client_id == client.client_id, (
        "the client registered again instead of using its registration"
    )


async def main() -> None:
    storage = Memory()
    person = Person()
    secrets: list[str] = []

    async def remember(request: httpx2.Request) -> None:
        """Every secret the client sends to the token endpoint, for the log check."""
        if request.url.path == "/oauth/token":
            form = parse_qs(request.content.decode())
            for name in ("code", "code_verifier", "refresh_token", "client_secret"):
                secrets.extend(form.get(name, []))

    oauth = provider(storage, person)
    http = create_mcp_http_client(auth=oauth)
    http.event_hooks["request"].append(remember)
    async with http:
        async with Client(streamable_http_client(f"{BASE}/mcp", http_client=http)) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            assert STATS in tools and PROVISION in tools, tools
            site = await client.call_tool(
                PROVISION, {"project_id": PROJECT, "name": "Shop", "domain": "shop.example"}
            )
            assert not site.is_error, site
            now = int(time.time() * 1000)
            week = {"project_id": PROJECT, "start_at": now - 7 * 86_400_000, "end_at": now}
            first = await client.call_tool(STATS, week)
            assert not first.is_error, first
            assert "pageviews" in json.dumps(first.structured_content), first
            before = storage.tokens
            # The server's access tokens live 2 s here: the next call refreshes.
            await asyncio.sleep(3)
            second = await client.call_tool(STATS, week)
            assert not second.is_error, second
            after = storage.tokens
    runs = int(os.environ.get("HOST_SIM_LOOPBACK_RUNS", "3"))
    for _ in range(runs):
        await connect_on_another_port(storage.client)
    secrets.extend([before.access_token, after.access_token])
    secrets.extend(t.refresh_token for t in (before, after) if t.refresh_token)
    if storage.client and storage.client.client_secret:
        secrets.append(storage.client.client_secret)
    print(
        json.dumps(
            {
                "tools": tools,
                "authorizations": person.authorizations,
                "refreshed": after.access_token != before.access_token
                and after.refresh_token != before.refresh_token
                and person.authorizations == 1,
                "scope": after.scope,
                "loopback_runs": runs,
                "secrets": sorted(set(secrets)),
            }
        )
    )


asyncio.run(main())
