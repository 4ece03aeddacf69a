"""Names the MCP protocol defines that the proxy acts on, in one place for every module that reads them."""

PROTOCOL_VERSION_META = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPS_META = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_META = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_META = "io.modelcontextprotocol/serverInfo"

# The server-to-client methods the proxy answers or governs, and the notification that ends a URL elicitation.
SAMPLING_CREATE = "sampling/createMessage"
ELICITATION_CREATE = "elicitation/create"
ELICITATION_COMPLETE = "notifications/elicitation/complete"
