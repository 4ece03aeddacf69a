// A client built on the official TypeScript SDK, against `mcp-sampling-proxy serve`'s endpoint.
//
// Usage: node serve_client.mjs URL TOKEN PROMPT. It connects with the SDK's StreamableHTTPClientTransport,
// sending `Authorization: Bearer TOKEN` on every request, lists the tools, calls server-everything's
// `trigger-sampling-request` with PROMPT (the server's sampling request is answered by the proxy, under
// its policy), closes the session (DELETE), and prints one JSON object on stdout: the protocol version,
// the tool names and the call's result. The SDK is loaded from the npm cache directory named by
// MCP_CONFORMANCE_NODE_MODULES (where .ci/run installs it).
import { createRequire } from "node:module";
import path from "node:path";

const [url, token, prompt] = process.argv.slice(2);
const require = createRequire(path.join(process.env.MCP_CONFORMANCE_NODE_MODULES, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
// no sampling capability: the host has no LLM of its own; the proxy answers the server's requests
const client = new Client({ name: "ts-sdk-serve-client", version: "1.0.0" }, { capabilities: {} });

try {
  await client.connect(transport);
  const { tools } = await client.listTools();
  const result = await client.callTool({ name: "trigger-sampling-request", arguments: { prompt, maxTokens: 50 } });
  const version = transport.protocolVersion;
  const session = transport.sessionId;
  await transport.terminateSession();
  await client.close();
  console.log(JSON.stringify({ version, session, tools: tools.map((t) => t.name), result }));
  process.exit(0);
} catch (error) {
  console.error(`client failed: ${error?.stack ?? error}`);
  process.exit(1);
}
