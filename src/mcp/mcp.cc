// The MCP protocol: JSON-RPC 2.0 messages, the lifecycle methods and tools/call.
#include "mcp/mcp.h"

#include <exception>

#include "mcp/tools.h"

namespace space::mcp {

namespace {

constexpr char kServerName[] = "space";
constexpr char kServerVersion[] = "0.1.0";
constexpr char kInstructions[] =
    "SPACE runs commands in isolated sandboxes. create_sandbox returns an id; pass it as "
    "sandbox_id to run_command, read_file, write_file, list_files, snapshot_sandbox, "
    "expose_port and delete_sandbox. Delete sandboxes you no longer need.";

Json Success(const Json& id, Json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json TextResult(const Json& value, bool is_error) {
  Json r = {{"content", Json::array({{{"type", "text"}, {"text", value.is_string() ? value.get<std::string>() : Dump(value)}}})},
            {"isError", is_error}};
  if (!is_error && value.is_object()) r["structuredContent"] = value;
  return r;
}

Json Initialize(const Json& params) {
  std::string asked = JsonStringOr(params, "protocolVersion", "");
  return {{"protocolVersion", SupportsProtocolVersion(asked) ? asked : kProtocolVersions[0]},
          {"capabilities", {{"tools", {{"listChanged", false}}}}},
          {"serverInfo", {{"name", kServerName}, {"title", "SPACE sandboxes"}, {"version", kServerVersion}}},
          {"instructions", kInstructions}};
}

// tools/call: a JSON-RPC error for a call that cannot be made, else the tool's result.
Json CallTool(const Json& id, const Json& params, client::Client& api) {
  const Json* name = JsonField(params, "name");
  if (!name || !name->is_string())
    return ErrorResponse(id, kInvalidParams, "tools/call needs params.name, a tool name");
  const internal::Tool* tool = internal::FindTool(name->get<std::string>());
  if (!tool) return ErrorResponse(id, kInvalidParams, "Unknown tool: " + name->get<std::string>());
  Json args = Json::object();
  if (auto it = params.find("arguments"); it != params.end() && !it->is_null()) args = *it;
  if (!args.is_object())
    return ErrorResponse(id, kInvalidParams, tool->name + ": arguments must be an object");
  if (auto why = internal::CheckArguments(tool->input_schema, args))
    return ErrorResponse(id, kInvalidParams, tool->name + ": " + *why);
  auto result = tool->run(args, api);
  if (!result) {
    const Error& e = result.error();
    return Success(id, TextResult(tool->name + " failed: " + e.message + " (" + std::string(ErrcName(e.code)) + ")", true));
  }
  return Success(id, TextResult(*result, false));
}

Json HandleRequest(const Json& id, const std::string& method, const Json& params,
                   client::Client& api) {
  if (method == "initialize") return Success(id, Initialize(params));
  if (method == "ping") return Success(id, Json::object());
  if (method == "tools/list") return Success(id, {{"tools", ToolList()}});
  if (method == "tools/call") return CallTool(id, params, api);
  return ErrorResponse(id, kMethodNotFound, "Method not found: " + method);
}

std::optional<Json> HandleOne(const Json& msg, client::Client& api) {
  if (!msg.is_object()) return ErrorResponse(nullptr, kInvalidRequest, "a JSON-RPC message is an object");
  auto idit = msg.find("id");
  const bool has_id = idit != msg.end();
  Json id = has_id && (idit->is_string() || idit->is_number_integer()) ? *idit : Json(nullptr);
  if (JsonStringOr(msg, "jsonrpc", "") != "2.0")
    return ErrorResponse(id, kInvalidRequest, "\"jsonrpc\" must be \"2.0\"");
  auto mit = msg.find("method");
  if (mit == msg.end()) {
    // A response (to a request this server never sends) or garbage.
    if (has_id && (msg.contains("result") || msg.contains("error"))) return std::nullopt;
    return ErrorResponse(id, kInvalidRequest, "a JSON-RPC request needs a \"method\"");
  }
  if (!mit->is_string()) return ErrorResponse(id, kInvalidRequest, "\"method\" must be a string");
  if (has_id && id.is_null())
    return ErrorResponse(nullptr, kInvalidRequest, "\"id\" must be a string or an integer");
  Json params = Json::object();
  if (auto pit = msg.find("params"); pit != msg.end() && !pit->is_null()) params = *pit;
  if (!has_id) return std::nullopt;  // a notification (initialized, cancelled, ...): no answer
  if (!params.is_object()) return ErrorResponse(id, kInvalidParams, "\"params\" must be an object");
  try {
    return HandleRequest(id, mit->get<std::string>(), params, api);
  } catch (const std::exception& e) {
    return ErrorResponse(id, kInternalError, std::string("internal error: ") + e.what());
  }
}

}  // namespace

bool SupportsProtocolVersion(std::string_view version) {
  for (const char* v : kProtocolVersions) {
    if (version == v) return true;
  }
  return false;
}

Json ErrorResponse(const Json& id, int code, std::string message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", std::move(message)}}}};
}

std::optional<Json> Handle(const Json& message, client::Client& api) {
  if (!message.is_array()) return HandleOne(message, api);
  // A batch (protocol 2025-03-26): the answers of its requests, in order.
  if (message.empty()) return ErrorResponse(nullptr, kInvalidRequest, "an empty batch");
  Json answers = Json::array();
  for (const Json& m : message) {
    if (auto a = HandleOne(m, api)) answers.push_back(std::move(*a));
  }
  if (answers.empty()) return std::nullopt;
  return answers;
}

std::optional<std::string> HandleText(std::string_view text, client::Client& api) {
  auto msg = ParseJson(text);
  if (!msg) return Dump(ErrorResponse(nullptr, kParseError, "Parse error: not JSON (or nested too deeply)"));
  auto answer = Handle(*msg, api);
  if (!answer) return std::nullopt;
  return Dump(*answer);
}

const Json& ToolList() {
  static const Json list = [] {
    Json l = Json::array();
    for (const auto& t : internal::Tools()) {
      l.push_back({{"name", t.name}, {"title", t.title}, {"description", t.description},
                   {"inputSchema", t.input_schema}});
    }
    return l;
  }();
  return list;
}

std::string Dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace space::mcp
