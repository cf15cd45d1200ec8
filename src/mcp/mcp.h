// mcp: SPACE's Model Context Protocol server — JSON-RPC 2.0 with the MCP methods
// (initialize, ping, tools/list, tools/call) and the sandbox tools (docs/mcp.md).
//
// One implementation for both transports: `space mcp` (stdio, one message a line) and
// spaced's `POST /mcp` (streamable HTTP, JSON responses). The server is stateless: every
// message is handled on its own, and tools act through spaced's HTTP API with the
// client::Client they are given, so a caller has exactly the rights of its credential
// (operator key or sandbox token) and nothing here bypasses the API's checks.
//
// Errors: a malformed message, an unknown method or tool and arguments that do not fit a
// tool's inputSchema are JSON-RPC errors; a tool that ran and failed (no such sandbox,
// spaced unreachable, ...) is a result with isError and the reason as its text. Handle never
// throws. Thread-safe: any number of messages may be handled at once (Client is thread-safe).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cli/client.h"
#include "common/json.h"

namespace space::mcp {

// Protocol versions this server speaks, newest first; initialize answers with the client's
// version when it is one of them, else with the newest.
inline constexpr const char* kProtocolVersions[] = {"2025-11-25", "2025-06-18", "2025-03-26",
                                                    "2024-11-05"};
bool SupportsProtocolVersion(std::string_view version);

// JSON-RPC error codes.
inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;

// Handles one parsed message: a request, a notification, a response (ignored: this server
// sends no requests) or a batch of them. Returns the answer, or nullopt when there is none to
// send (notifications and responses only).
std::optional<Json> Handle(const Json& message, client::Client& api);

// The same for a message as text; a parse error is answered (id null). The answer is one
// line of JSON without a newline.
std::optional<std::string> HandleText(std::string_view text, client::Client& api);

// {"jsonrpc":"2.0","id":id,"error":{"code","message"}}.
Json ErrorResponse(const Json& id, int code, std::string message);

// The tools as tools/list describes them ({name, title, description, inputSchema}).
const Json& ToolList();

// JSON as one line of text; invalid UTF-8 in strings (command output) becomes U+FFFD.
std::string Dump(const Json& j);

}  // namespace space::mcp
