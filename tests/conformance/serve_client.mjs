// A client built on the official TypeScript SDK, against `mcp-sampling-proxy serve`'s endpoint.
//
// Usage: node serve_client.mjs URL TOKEN PROMPT [2026-07-28]. It connects with the SDK's
// StreamableHTTPClientTransport, sending `Authorization: Bearer TOKEN` on every request, lists the tools,
// calls server-everything's `trigger-sampling-request` with PROMPT (the server's sampling request is
// answered by the proxy, under its policy), closes, and prints one JSON object on stdout: the protocol
// version, the tool names and the call's result. Without a version it is SDK 1.x
// (@modelcontextprotocol/sdk, handshake era; it ends its session with DELETE); with 2026-07-28 it is SDK
// 2.x (@modelcontextprotocol/client) pinned to that revision (server/discover, no session). The SDKs are
// loaded from the npm cache directory named by MCP_CONFORMANCE_NODE_MODULES (where .ci/run installs them).
import { createRequire } from "node:module";
import path from "node:path";

const [url, token, prompt, pinned] = process.argv.slice(2);
const require = createRequire(path.join(process.env.MCP_CONFORMANCE_NODE_MODULES, "noop.js"));
const headers = { Authorization: `Bearer ${token}` };
// no sampling capability: the host has no LLM of its own; the proxy answers the server's requests
const info = { name: "ts-sdk-serve-client", version: "1.0.0" };

let client, transport;
if (pinned) {
  const sdk = require("@modelcontextprotocol/client");
  transport = new sdk.StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  client = new sdk.Client(info, { capabilities: {}, versionNegotiation: { mode: { pin: pinned } } });
} else {
  const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
  const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  client = new Client(info, { capabilities: {} });
}

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: "trigger-sampling-request", arguments: { prompt, maxTokens: 50 } });
  const version = pinned ? client.getNegotiatedProtocolVersion() : transport.protocolVersion;
  const session = transport.sessionId ?? null;
  if (session) await transport.terminateSession();
  await client.close();
  console.log(JSON.stringify({ version, session, tools: tools.map((t) => t.name), result }));
  process.exit(0);
} catch (error) {
  console.error(`client failed: ${error?.stack ?? error}`);
  process.exit(1);
}
