// The protocol layer of the MCP server, without a spaced: JSON-RPC framing and errors,
// initialize, tools/list, argument checks. Tools that reach spaced are exercised against a
// real daemon by tests/mcp (the official TypeScript client over both transports); here they
// meet a closed port, which must be a tool error (isError), not a crash or a protocol error.
#include "mcp/mcp.h"

#include <gtest/gtest.h>

#include <set>

#include "mcp/tools.h"

namespace space::mcp {
namespace {

// Port 1 on loopback: nothing listens, so every API call fails at once.
client::Client& Offline() {
  static client::Client c("http://127.0.0.1:1", "key");
  return c;
}

Json Call(const std::string& text) {
  auto out = HandleText(text, Offline());
  EXPECT_TRUE(out.has_value()) << text;
  auto j = ParseJson(out.value_or("null"));
  EXPECT_TRUE(j.has_value());
  return j.value_or(Json());
}

int ErrorCode(const Json& answer) { return answer.value("/error/code"_json_pointer, 0); }

TEST(McpTest, InitializeNegotiatesTheVersion) {
  Json a = Call(R"({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}})");
  EXPECT_EQ(a["id"], 1);
  EXPECT_EQ(a["result"]["protocolVersion"], "2025-06-18");
  EXPECT_TRUE(a["result"]["capabilities"].contains("tools"));
  EXPECT_EQ(a["result"]["serverInfo"]["name"], "space");
  // A version it does not know: the newest it does.
  a = Call(R"({"jsonrpc":"2.0","id":"x","method":"initialize","params":{"protocolVersion":"1999-01-01"}})");
  EXPECT_EQ(a["id"], "x");
  EXPECT_EQ(a["result"]["protocolVersion"], kProtocolVersions[0]);
}

TEST(McpTest, NotificationsAndResponsesGetNoAnswer) {
  EXPECT_FALSE(HandleText(R"({"jsonrpc":"2.0","method":"notifications/initialized"})", Offline()));
  EXPECT_FALSE(HandleText(R"({"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}})", Offline()));
  EXPECT_FALSE(HandleText(R"({"jsonrpc":"2.0","id":5,"result":{}})", Offline()));
}

TEST(McpTest, ProtocolErrors) {
  EXPECT_EQ(ErrorCode(Call("{not json")), kParseError);
  EXPECT_EQ(ErrorCode(Call(std::string(100, '[') + std::string(100, ']'))), kParseError);
  EXPECT_EQ(ErrorCode(Call("42")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(Call(R"({"id":1,"method":"ping"})")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(Call(R"({"jsonrpc":"1.0","id":1,"method":"ping"})")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(Call(R"({"jsonrpc":"2.0","id":1,"method":7})")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(Call(R"({"jsonrpc":"2.0","id":{"a":1},"method":"ping"})")), kInvalidRequest);
  EXPECT_EQ(ErrorCode(Call(R"({"jsonrpc":"2.0","id":1,"method":"ping","params":[1]})")), kInvalidParams);
  EXPECT_EQ(ErrorCode(Call(R"({"jsonrpc":"2.0","id":1,"method":"resources/list"})")), kMethodNotFound);
  EXPECT_EQ(ErrorCode(Call("[]")), kInvalidRequest);
}

TEST(McpTest, BatchesAnswerTheirRequests) {
  Json a = Call(R"([{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":2,"method":"nope"}])");
  ASSERT_TRUE(a.is_array());
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0]["id"], 1);
  EXPECT_TRUE(a[0]["result"].is_object());
  EXPECT_EQ(ErrorCode(a[1]), kMethodNotFound);
}

TEST(McpTest, ToolsListHasTheSandboxTools) {
  Json a = Call(R"({"jsonrpc":"2.0","id":1,"method":"tools/list"})");
  std::set<std::string> names;
  for (const auto& t : a["result"]["tools"]) {
    names.insert(t["name"]);
    EXPECT_EQ(t["inputSchema"]["type"], "object") << t["name"];
    EXPECT_FALSE(t["description"].get<std::string>().empty());
  }
  for (const char* want : {"create_sandbox", "list_sandboxes", "delete_sandbox", "run_command",
                           "read_file", "write_file", "list_files", "snapshot_sandbox", "expose_port"})
    EXPECT_TRUE(names.count(want)) << want;
}

TEST(McpTest, BadCallsAreInvalidParams) {
  auto call = [](const std::string& params) {
    return Call(R"({"jsonrpc":"2.0","id":9,"method":"tools/call","params":)" + params + "}");
  };
  EXPECT_EQ(ErrorCode(call(R"({})")), kInvalidParams);
  EXPECT_EQ(ErrorCode(call(R"({"name":"no_such_tool"})")), kInvalidParams);
  EXPECT_EQ(ErrorCode(call(R"({"name":"run_command","arguments":"x"})")), kInvalidParams);
  Json a = call(R"({"name":"run_command","arguments":{"sandbox_id":"sb-1"}})");
  EXPECT_EQ(ErrorCode(a), kInvalidParams);
  EXPECT_NE(a["error"]["message"].get<std::string>().find("command is required"), std::string::npos) << a;
  a = call(R"({"name":"run_command","arguments":{"sandbox_id":"sb-1","command":"ls","timeout":"soon"}})");
  EXPECT_NE(a["error"]["message"].get<std::string>().find("timeout must be a number"), std::string::npos) << a;
  a = call(R"({"name":"run_command","arguments":{"sandbox_id":"sb-1","command":"ls","env":{"A":1}}})");
  EXPECT_NE(a["error"]["message"].get<std::string>().find("env.A must be a string"), std::string::npos) << a;
  a = call(R"({"name":"create_sandbox","arguments":{"colour":"red"}})");
  EXPECT_NE(a["error"]["message"].get<std::string>().find("unknown argument \"colour\""), std::string::npos) << a;
  a = call(R"({"name":"expose_port","arguments":{"sandbox_id":"sb-1","port":70000}})");
  EXPECT_NE(a["error"]["message"].get<std::string>().find("port must be at most 65535"), std::string::npos) << a;
  a = call(R"({"name":"read_file","arguments":{"sandbox_id":"sb-1","path":"/x","encoding":"latin1"}})");
  EXPECT_EQ(ErrorCode(a), kInvalidParams);
}

TEST(McpTest, AToolThatFailsIsAToolError) {
  Json a = Call(R"({"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"list_sandboxes","arguments":{}}})");
  ASSERT_TRUE(a.contains("result")) << a;
  EXPECT_EQ(a["result"]["isError"], true);
  std::string text = a["result"]["content"][0]["text"];
  EXPECT_NE(text.find("list_sandboxes failed"), std::string::npos) << text;
  // An id that would escape its path segment never reaches spaced.
  a = Call(R"({"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"get_sandbox","arguments":{"sandbox_id":"../keys"}}})");
  EXPECT_EQ(a["result"]["isError"], true);
  EXPECT_NE(a["result"]["content"][0]["text"].get<std::string>().find("is not an id"), std::string::npos);
}

TEST(McpTest, DumpReplacesInvalidUtf8) {
  Json j = {{"stdout", std::string("a\xff" "b")}};
  EXPECT_EQ(Dump(j), "{\"stdout\":\"a\xef\xbf\xbd" "b\"}");
}

}  // namespace
}  // namespace space::mcp
