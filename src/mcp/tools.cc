// The MCP tools: each one is a few calls of spaced's HTTP API through client::Client.
#include "mcp/tools.h"

#include <algorithm>
#include <cstring>

namespace space::mcp::internal {

namespace {

using std::chrono::milliseconds;

// How long a tool lets spaced hold an answer for an operation (create, snapshot, delete)
// before reporting it as still running: under the 60 s MCP clients wait by default.
constexpr milliseconds kOperationWait{50000};
// Output kept per stream of run_command, and the largest file read_file returns.
constexpr size_t kMaxOutputBytes = 1 << 20;
constexpr uint64_t kMaxReadBytes = 4 << 20;
constexpr int64_t kDefaultCommandTimeoutS = 60;

// ---------------------------------------------------------------- text helpers

bool ValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1f) : n == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < n; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc >> 6) != 0x2) return false;
      cp = (cp << 6) | (cc & 0x3f);
    }
    // Overlong forms, surrogates and beyond U+10FFFF are not UTF-8.
    if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
      return false;
    i += n;
  }
  return true;
}

constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(kB64[(v >> (6 * k)) & 63]);
  }
  if (size_t rest = in.size() - i; rest > 0) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out.push_back(kB64[(v >> 18) & 63]);
    out.push_back(kB64[(v >> 12) & 63]);
    out.push_back(rest == 2 ? kB64[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// Strict: the standard alphabet, padding only at the end; whitespace is skipped.
std::optional<std::string> Base64Decode(std::string_view in) {
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  size_t pad = 0;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      ++pad;
      continue;
    }
    if (pad > 0) return std::nullopt;
    const char* p = std::strchr(kB64, c);
    if (!p || c == '\0') return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(p - kB64);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xff));
    }
  }
  if (pad > 2 || bits >= 6) return std::nullopt;
  return out;
}

// ---------------------------------------------------------------- argument access

std::string Str(const Json& args, const char* key, std::string def = "") {
  return JsonStringOr(args, key, std::move(def));
}

// An API path component: sandbox ids go into paths, so they must not smuggle a '/' or '?'.
Status CheckId(const std::string& id, const char* what) {
  if (id.empty() || id.find_first_of("/?#%") != std::string::npos)
    return Fail(Errc::kInvalidArgument, std::string(what) + " \"" + id + "\" is not an id");
  return Ok();
}

Result<std::string> SandboxId(const Json& args) {
  std::string id = Str(args, "sandbox_id");
  if (auto st = CheckId(id, "sandbox_id"); !st) return tl::unexpected(st.error());
  return id;
}

// The operation part of an answer, reported when it had not finished within the wait.
Json Pending(const Json& op, const std::string& what) {
  return {{"operation_id", JsonStringOr(op, "id", "")},
          {"operation_state", JsonStringOr(op, "state", "")},
          {"note", what + " is still in progress; get_operation with this operation_id says when it is done"}};
}

// ---------------------------------------------------------------- tools

Result<Json> CreateSandbox(const Json& args, client::Client& api) {
  Json body = Json::object();
  for (const char* k : {"template", "runtime", "timeout", "network", "env", "metadata"}) {
    if (args.contains(k)) body[k] = args[k];
  }
  auto answer = api.CreateSandbox(body, kOperationWait);
  if (!answer) return tl::unexpected(answer.error());
  Json sb = JsonField(*answer, "sandbox") ? (*answer)["sandbox"] : Json::object();
  const Json* op = JsonField(*answer, "operation");
  Json out = {{"id", JsonStringOr(sb, "id", "")}, {"state", JsonStringOr(sb, "state", "")},
              {"sandbox", sb}};
  if (op && JsonStringOr(*op, "state", "") != "succeeded") out.update(Pending(*op, "the create"));
  return out;
}

Result<Json> ListSandboxes(const Json& args, client::Client& api) {
  std::vector<std::pair<std::string, std::string>> labels;
  if (const Json* m = JsonField(args, "metadata")) {
    for (const auto& [k, v] : m->items()) labels.emplace_back(k, v.get<std::string>());
  }
  auto list = api.ListSandboxes(labels, Str(args, "state"));
  if (!list) return tl::unexpected(list.error());
  return Json{{"sandboxes", *list}};
}

Result<Json> GetSandbox(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  return api.GetSandbox(*id);
}

Result<Json> DeleteSandbox(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  auto answer = api.DeleteSandbox(*id, kOperationWait);
  if (!answer) return tl::unexpected(answer.error());
  const Json* op = JsonField(*answer, "operation");
  Json out = {{"id", *id}};
  if (!op) return out;
  std::string state = JsonStringOr(*op, "state", "");
  if (state == "failed") return tl::unexpected(client::Client::OperationError(*op));
  out["deleted"] = state == "succeeded";
  if (state != "succeeded") out.update(Pending(*op, "the delete"));
  return out;
}

// Keeps the first kMaxOutputBytes of a stream and counts the rest.
struct Capped {
  std::string kept;
  uint64_t total = 0;
  void Add(std::string_view b) {
    total += b.size();
    if (kept.size() < kMaxOutputBytes)
      kept.append(b.substr(0, std::min(b.size(), kMaxOutputBytes - kept.size())));
  }
};

Result<Json> RunCommand(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  Json body = {{"cmd", Str(args, "command")},
               {"timeout", args.contains("timeout") ? args["timeout"] : Json(kDefaultCommandTimeoutS)}};
  for (const char* k : {"cwd", "env", "user"}) {
    if (args.contains(k)) body[k] = args[k];
  }
  Capped out, err;
  auto collect = [&](client::MuxKind kind, std::string_view bytes) {
    if (kind == client::MuxKind::kStdout) out.Add(bytes);
    if (kind == client::MuxKind::kStderr) err.Add(bytes);
    return true;
  };
  client::MuxOffsets offsets;
  std::string cid;
  auto command = api.StartAndStream(*id, body, offsets, collect, &cid);
  // A stream that dropped after the command started resumes where it stopped.
  if (!command && command.error().code == Errc::kUnavailable && !cid.empty())
    command = api.FollowOutput(*id, cid, offsets, collect);
  if (!command) return tl::unexpected(command.error());
  Json result = {{"exit_code", client::Client::ExitCodeOf(*command)},
                 {"stdout", out.kept},
                 {"stderr", err.kept},
                 {"command_id", JsonStringOr(*command, "id", cid)},
                 {"state", JsonStringOr(*command, "state", "")}};
  if (JsonBoolOr(*command, "timed_out", false)) result["timed_out"] = true;
  if (const Json* sig = JsonField(*command, "signal")) result["signal"] = *sig;
  for (auto [name, c] : {std::pair{"stdout", &out}, std::pair{"stderr", &err}}) {
    if (c->total > c->kept.size()) {
      result[std::string(name) + "_truncated"] = true;
      result[std::string(name) + "_bytes"] = c->total;
    }
  }
  return result;
}

Result<Json> ReadFile(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  std::string path = Str(args, "path");
  std::string data;
  bool too_big = false;
  auto size = api.ReadFile(*id, path, [&](std::string_view b) {
    if (data.size() + b.size() > kMaxReadBytes) {
      too_big = true;
      return false;
    }
    data.append(b);
    return true;
  });
  if (too_big) {
    return Fail(Errc::kInvalidArgument, path + " is larger than " + std::to_string(kMaxReadBytes) +
                                            " bytes, the most read_file returns (use `space cp`)");
  }
  if (!size) return tl::unexpected(size.error());
  std::string encoding = Str(args, "encoding", ValidUtf8(data) ? "utf-8" : "base64");
  if (encoding == "utf-8" && !ValidUtf8(data)) {
    return Fail(Errc::kInvalidArgument, path + " is not UTF-8 text: read it with encoding \"base64\"");
  }
  return Json{{"path", path},
              {"size", data.size()},
              {"encoding", encoding},
              {"content", encoding == "base64" ? Base64Encode(data) : data}};
}

Result<Json> WriteFile(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  std::string content = Str(args, "content");
  if (Str(args, "encoding", "utf-8") == "base64") {
    auto decoded = Base64Decode(content);
    if (!decoded) return Fail(Errc::kInvalidArgument, "content is not valid base64");
    content = std::move(*decoded);
  }
  int mode = static_cast<int>(JsonIntOr(args, "mode", -1));
  return api.WriteFile(*id, Str(args, "path"), content, mode);
}

Result<Json> ListFiles(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  std::string path = Str(args, "path", "/");
  auto entries = api.ListFiles(*id, path, static_cast<int>(JsonIntOr(args, "depth", 1)));
  if (!entries) return tl::unexpected(entries.error());
  return Json{{"path", path}, {"entries", *entries}};
}

Result<Json> SnapshotSandbox(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  auto answer = api.StartSnapshot(*id, kOperationWait);
  if (!answer) return tl::unexpected(answer.error());
  const Json* op = JsonField(*answer, "operation");
  Json opj = op ? *op : Json::object();
  if (JsonStringOr(opj, "state", "") == "failed")
    return tl::unexpected(client::Client::OperationError(opj));
  Json out = {{"sandbox_id", *id}};
  if (const Json* snap = JsonField(*answer, "snapshot")) {
    out["snapshot_id"] = JsonStringOr(*snap, "id", "");
    out["snapshot"] = *snap;
    return out;
  }
  if (const Json* r = JsonField(opj, "result"); r && JsonField(*r, "snapshot_id")) {
    out["snapshot_id"] = (*r)["snapshot_id"];
    return out;
  }
  out.update(Pending(opj, "the snapshot"));
  return out;
}

Result<Json> ExposePort(const Json& args, client::Client& api) {
  auto id = SandboxId(args);
  if (!id) return tl::unexpected(id.error());
  return api.PortUrl(*id, std::to_string(JsonIntOr(args, "port", 0)), JsonIntOr(args, "ttl", 0));
}

Result<Json> GetOperation(const Json& args, client::Client& api) {
  std::string id = Str(args, "operation_id");
  if (auto st = CheckId(id, "operation_id"); !st) return tl::unexpected(st.error());
  return api.GetOperation(id, milliseconds{JsonIntOr(args, "wait", 0) * 1000});
}

// ---------------------------------------------------------------- schemas

Json Prop(const char* type, const char* description) {
  return {{"type", type}, {"description", description}};
}

const Json kSandboxId = Prop("string", "The sandbox's id (sb-…), as create_sandbox or list_sandboxes return it");
const Json kStringMap = {{"type", "object"}, {"additionalProperties", {{"type", "string"}}}};

Json Schema(Json properties, std::vector<std::string> required = {}) {
  Json s = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) s["required"] = required;
  return s;
}

std::vector<Tool> MakeTools() {
  std::vector<Tool> t;
  Json env = kStringMap;
  env["description"] = "Environment variables (name to value)";
  Json metadata = kStringMap;
  metadata["description"] = "Labels to attach (name to value); list_sandboxes filters on them";
  Json network = {{"type", {"boolean", "object"}},
                  {"description",
                   "Network access: false for none, true for the internet, or a policy "
                   "{mode, allow_out, deny_out, public_traffic} (docs/networking.md). "
                   "Default: spaced's --default-network"}};
  t.push_back({"create_sandbox", "Create a sandbox",
               "Creates a sandbox and waits until it runs. The result's \"id\" is the sandbox id "
               "every other tool takes.",
               Schema({{"template", Prop("string", "Template to start from, e.g. base:latest (default: spaced's)")},
                       {"runtime", Prop("string", "Runtime: oci (containers) or microvm (VMs); default: spaced's")},
                       {"timeout", {{"type", "integer"}, {"minimum", 0},
                                    {"description", "Seconds until the sandbox is deleted (0 = never); default: spaced's"}}},
                       {"network", network},
                       {"env", env},
                       {"metadata", metadata}}),
               CreateSandbox});
  t.push_back({"list_sandboxes", "List sandboxes", "Lists the sandboxes (all states but deleted).",
               Schema({{"state", Prop("string", "Only sandboxes in this state (running, paused, ...)")},
                       {"metadata", metadata}}),
               ListSandboxes});
  t.push_back({"get_sandbox", "Describe a sandbox", "Returns one sandbox: state, template, runtime, limits, expiry.",
               Schema({{"sandbox_id", kSandboxId}}, {"sandbox_id"}), GetSandbox});
  t.push_back({"delete_sandbox", "Delete a sandbox", "Deletes a sandbox and everything in it.",
               Schema({{"sandbox_id", kSandboxId}}, {"sandbox_id"}), DeleteSandbox});
  t.push_back({"run_command", "Run a shell command",
               "Runs a shell command (sh -c) in a sandbox and returns its stdout, stderr and "
               "exit_code (124 when it timed out). Each output keeps its first 1 MiB.",
               Schema({{"sandbox_id", kSandboxId},
                       {"command", {{"type", "string"}, {"minLength", 1}, {"description", "The shell command line"}}},
                       {"cwd", Prop("string", "Working directory (default: the sandbox's)")},
                       {"env", env},
                       {"user", Prop("string", "User to run as (default: the sandbox's)")},
                       {"timeout", {{"type", "number"}, {"minimum", 0},
                                    {"description", "Seconds before the command is killed (0 = none); default 60"}}}},
                      {"sandbox_id", "command"}),
               RunCommand});
  Json encoding_read = {{"type", "string"}, {"enum", {"utf-8", "base64"}},
                        {"description", "utf-8 or base64; default: utf-8 when the file is UTF-8 text, else base64"}};
  t.push_back({"read_file", "Read a file",
               "Returns a file's content (at most 4 MiB), as text or base64 (\"encoding\" says which).",
               Schema({{"sandbox_id", kSandboxId},
                       {"path", Prop("string", "Absolute path inside the sandbox")},
                       {"encoding", encoding_read}},
                      {"sandbox_id", "path"}),
               ReadFile});
  Json encoding_write = {{"type", "string"}, {"enum", {"utf-8", "base64"}},
                         {"description", "How content is encoded: utf-8 (default) or base64"}};
  t.push_back({"write_file", "Write a file",
               "Writes a file (parent directories are made), replacing what was there.",
               Schema({{"sandbox_id", kSandboxId},
                       {"path", Prop("string", "Absolute path inside the sandbox")},
                       {"content", Prop("string", "The file's content")},
                       {"encoding", encoding_write},
                       {"mode", {{"type", "integer"}, {"minimum", 0}, {"maximum", 4095},
                                 {"description", "Permission bits, e.g. 493 for 0755 (default 0644)"}}}},
                      {"sandbox_id", "path", "content"}),
               WriteFile});
  t.push_back({"list_files", "List a directory",
               "Lists a directory: entries with name, path, type, size and mode.",
               Schema({{"sandbox_id", kSandboxId},
                       {"path", Prop("string", "Absolute directory path inside the sandbox (default /)")},
                       {"depth", {{"type", "integer"}, {"minimum", 1}, {"maximum", 32},
                                  {"description", "How many levels to descend (default 1)"}}}},
                      {"sandbox_id"}),
               ListFiles});
  t.push_back({"snapshot_sandbox", "Snapshot a sandbox",
               "Takes a snapshot of a sandbox's filesystem; the result's snapshot_id can start new sandboxes.",
               Schema({{"sandbox_id", kSandboxId}}, {"sandbox_id"}), SnapshotSandbox});
  t.push_back({"expose_port", "Expose a port",
               "Returns a URL that reaches a port inside the sandbox (signed, expiring).",
               Schema({{"sandbox_id", kSandboxId},
                       {"port", {{"type", "integer"}, {"minimum", 1}, {"maximum", 65535},
                                 {"description", "The port a server listens on inside the sandbox"}}},
                       {"ttl", {{"type", "integer"}, {"minimum", 1},
                                {"description", "Seconds the URL works (default 3600)"}}}},
                      {"sandbox_id", "port"}),
               ExposePort});
  t.push_back({"get_operation", "Check an operation",
               "Returns an operation (create, delete, snapshot...) and its state; with wait, waits up to that many seconds for it to finish.",
               Schema({{"operation_id", Prop("string", "The operation's id (op-…)")},
                       {"wait", {{"type", "integer"}, {"minimum", 0}, {"maximum", 50},
                                 {"description", "Seconds to wait for it to finish (default 0)"}}}},
                      {"operation_id"}),
               GetOperation});
  return t;
}

bool IsType(const Json& v, const std::string& type) {
  if (type == "string") return v.is_string();
  if (type == "integer") return v.is_number_integer();
  if (type == "number") return v.is_number();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "null") return v.is_null();
  return false;
}

}  // namespace

const std::vector<Tool>& Tools() {
  static const std::vector<Tool> tools = MakeTools();
  return tools;
}

const Tool* FindTool(std::string_view name) {
  for (const Tool& t : Tools()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::optional<std::string> CheckArguments(const Json& schema, const Json& value,
                                          const std::string& where) {
  const std::string at = where.empty() ? "arguments" : where;
  if (const Json* type = JsonField(schema, "type")) {
    bool ok = false;
    std::string want;
    for (const Json& t : type->is_array() ? *type : Json::array({*type})) {
      ok = ok || IsType(value, t.get<std::string>());
      want += (want.empty() ? "" : " or ") + t.get<std::string>();
    }
    if (!ok) return at + " must be " + (want == "integer" ? "an " : "a ") + want;
  }
  if (const Json* e = JsonField(schema, "enum")) {
    if (std::find(e->begin(), e->end(), value) == e->end())
      return at + " must be one of " + e->dump();
  }
  if (value.is_number()) {
    double v = value.get<double>();
    if (const Json* m = JsonField(schema, "minimum"); m && v < m->get<double>())
      return at + " must be at least " + m->dump();
    if (const Json* m = JsonField(schema, "maximum"); m && v > m->get<double>())
      return at + " must be at most " + m->dump();
  }
  if (value.is_string()) {
    if (const Json* m = JsonField(schema, "minLength");
        m && value.get_ref<const std::string&>().size() < m->get<size_t>())
      return at + " must not be empty";
  }
  if (value.is_object()) {
    const Json* props = JsonField(schema, "properties");
    if (const Json* req = JsonField(schema, "required")) {
      for (const Json& r : *req) {
        const std::string& k = r.get_ref<const std::string&>();
        if (!value.contains(k) || value[k].is_null())
          return (where.empty() ? "" : where + ".") + k + " is required";
      }
    }
    for (const auto& [k, v] : value.items()) {
      std::string sub = where.empty() ? k : where + "." + k;
      if (props && props->contains(k)) {
        if (auto why = CheckArguments((*props)[k], v, sub)) return why;
        continue;
      }
      auto extra = schema.find("additionalProperties");
      if (extra == schema.end()) continue;
      if (extra->is_boolean()) {
        if (!extra->get<bool>()) return "unknown argument \"" + sub + "\"";
        continue;
      }
      if (auto why = CheckArguments(*extra, v, sub)) return why;
    }
  }
  if (value.is_array()) {
    if (const Json* items = JsonField(schema, "items")) {
      for (size_t i = 0; i < value.size(); ++i) {
        if (auto why = CheckArguments(*items, value[i], at + "[" + std::to_string(i) + "]")) return why;
      }
    }
  }
  return std::nullopt;
}

}  // namespace space::mcp::internal
