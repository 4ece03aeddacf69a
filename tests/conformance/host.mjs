// A host built on the official TypeScript SDK client, for the MCP conformance suite's client scenarios.
//
// The suite starts a scenario's server and runs this script with the server's URL as the last argument
// (the scenario's name in MCP_CONFORMANCE_SCENARIO). `--via direct` connects to the URL with the SDK's
// Streamable HTTP transport; `--via proxy` starts mcp-sampling-proxy --url URL over stdio (the command in
// MCP_CONFORMANCE_PROXY, a JSON array) and talks to it, so the same host runs each scenario both ways.
// `--elicitation` declares form elicitation with the SDK's applyDefaults, as a host with forms would;
// without it the host declares no elicitation, like most hosts. The SDK is loaded from the npm cache
// directory named by MCP_CONFORMANCE_NODE_MODULES (where .ci/run installs it).
import { createRequire } from "node:module";
import path from "node:path";

const args = process.argv.slice(2);
const url = args[args.length - 1];
const via = args[args.indexOf("--via") + 1];
const elicitation = args.includes("--elicitation");
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? "";
const require = createRequire(path.join(process.env.MCP_CONFORMANCE_NODE_MODULES, "noop.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ElicitRequestSchema } = require("@modelcontextprotocol/sdk/types.js");

function transport() {
  if (via === "direct") return new StreamableHTTPClientTransport(new URL(url));
  const [command, ...rest] = JSON.parse(process.env.MCP_CONFORMANCE_PROXY);
  return new StdioClientTransport({ command, args: [...rest, "--url", url], env: process.env, stderr: "inherit" });
}

const capabilities = elicitation ? { elicitation: { form: { applyDefaults: true } } } : {};
const client = new Client({ name: "conformance-host", version: "1.0.0" }, { capabilities });
if (elicitation) {
  // A user who presses Accept without typing anything: the SDK fills in the schema's defaults.
  client.setRequestHandler(ElicitRequestSchema, async () => ({ action: "accept", content: {} }));
}

function argumentsFor(schema) {
  const values = { number: 1, integer: 1, boolean: true, string: "x", array: [], object: {} };
  const properties = schema?.properties ?? {};
  return Object.fromEntries((schema?.required ?? []).map((name) => {
    const field = properties[name] ?? {};
    return [name, "default" in field ? field.default : field.enum ? field.enum[0] : values[field.type] ?? "x"];
  }));
}

const calls = {
  "tools_call": ["add_numbers", { a: 5, b: 3 }],
  "elicitation-sep1034-client-defaults": ["test_client_elicitation_defaults", {}],
  "sse-retry": ["test_reconnection", {}],
};

try {
  await client.connect(transport());
  const { tools } = await client.listTools();
  console.log(`tools: ${tools.map((t) => t.name).join(", ")}`);
  const call = calls[scenario];
  if (call) {
    const result = await client.callTool({ name: call[0], arguments: call[1] });
    console.log(JSON.stringify(result));
  } else {
    // a scenario this host knows nothing of: call each tool, with arguments made from its input schema
    for (const tool of tools) {
      const result = await client.callTool({ name: tool.name, arguments: argumentsFor(tool.inputSchema) });
      console.log(`${tool.name}: ${JSON.stringify(result).slice(0, 500)}`);
    }
  }
  await client.close();
  process.exit(0);
} catch (error) {
  console.error(`host failed: ${error?.stack ?? error}`);
  process.exit(1);
}
