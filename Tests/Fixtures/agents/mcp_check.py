"""An AI agent's view of Parley, played by the official MCP Python SDK (PyPI mcp).

Starts a real MCP server (the SDK's MCPServer, streamable HTTP, under uvicorn) on
--upstream-port as the back end Parley fronts, then connects the SDK's MCP client to Parley's
proxy path for --destination. The client is configured the way an agent is: with its client
credentials and its authorization server's issuer only. It must find everything else itself:
the first call is refused with a 401 whose WWW-Authenticate names Parley's protected-resource
metadata (RFC 9728); the SDK reads it, discovers the authorization server (RFC 8414), gets a
token for Parley's resource (client_credentials with RFC 8707 `resource`), and calls again.

Writes what happened as JSON to --out: every HTTP request the client made (method, URL,
status), the tools it listed, what the echo tool answered, the Authorization headers the
upstream MCP server saw (none may reach it), and the access token (so that the test can check
Parley never logged it). Exits 1 with a message when the session cannot be used.

Run through `scripts/peer-python.sh mcp-sdk`, which provides the SDK in a pinned venv.
"""

import argparse
import json
import sys
import threading
import time

import anyio
import httpx2
import uvicorn
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer

seen_authorization: list[str] = []


def upstream_app():
    server = MCPServer("parley-test-upstream")

    @server.tool()
    def echo(text: str) -> str:
        """Answers with the text it was given."""
        return "upstream echo: " + text

    @server.tool()
    def seen_authorization_headers() -> str:
        """The Authorization headers this server was sent, as JSON."""
        return json.dumps(seen_authorization)

    app = server.streamable_http_app(json_response=True, stateless_http=True)

    async def recording(scope, receive, send):
        # Every Authorization header that reaches the back end: Parley must send none of the agent's.
        if scope["type"] == "http":
            for name, value in scope.get("headers", []):
                if name.lower() == b"authorization":
                    seen_authorization.append(value.decode("latin-1"))
        await app(scope, receive, send)

    return recording


def start_upstream(port: int) -> uvicorn.Server:
    config = uvicorn.Config(upstream_app(), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            sys.exit(f"mcp_check: the upstream MCP server did not start on port {port}")
        time.sleep(0.05)
    return server


class MemoryStorage:
    """The SDK's TokenStorage, in memory: a new agent with nothing stored."""

    def __init__(self):
        self.tokens = None
        self.client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info):
        self.client_info = client_info


async def run_agent(args) -> dict:
    url = args.parley.rstrip("/") + "/v1/proxy/mcp"
    storage = MemoryStorage()
    provider = ClientCredentialsOAuthProvider(
        server_url=url,
        storage=storage,
        client_id=args.client_id,
        client_secret=args.client_secret,
        scope=args.scope,
        issuer=args.issuer,
    )
    requests: list[dict] = []

    async def on_response(response):
        requests.append({"method": response.request.method, "url": str(response.request.url), "status": response.status_code})

    headers = {"Parley-Destination": args.destination}
    async with httpx2.AsyncClient(auth=provider, headers=headers, timeout=30, event_hooks={"response": [on_response]}) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                tools = await session.list_tools()
                echoed = await session.call_tool("echo", {"text": "hello through parley"})
                seen = await session.call_tool("seen_authorization_headers", {})
    tokens = storage.tokens
    return {
        "requests": requests,
        "tools": sorted(tool.name for tool in tools.tools),
        "echo": "".join(part.text for part in echoed.content if getattr(part, "type", "") == "text"),
        "upstreamSawAuthorization": json.loads("".join(part.text for part in seen.content if getattr(part, "type", "") == "text")),
        "accessToken": tokens.access_token if tokens else None,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--upstream-port", type=int, required=True)
    parser.add_argument("--parley", required=True)
    parser.add_argument("--issuer", required=True)
    parser.add_argument("--destination", required=True)
    parser.add_argument("--client-id", required=True)
    parser.add_argument("--client-secret", required=True)
    parser.add_argument("--scope", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    upstream = start_upstream(args.upstream_port)
    try:
        result = anyio.run(run_agent, args)
    except BaseException as error:  # an ExceptionGroup from the SDK's task groups included
        sys.exit(f"mcp_check: the MCP session through Parley failed: {error!r}")
    finally:
        upstream.should_exit = True
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)


if __name__ == "__main__":
    main()
