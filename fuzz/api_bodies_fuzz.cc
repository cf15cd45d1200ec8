// Fuzz target api_bodies: the request body of every spaced route that takes one, through the
// real parsers of api/parse.h.
//
// Input: one byte choosing the route (modulo the table below), then the raw body. The body
// goes through ParseJsonBody as Ctx::ReadJson does (POST /v1/templates: ParseJson and its
// object check, as that route does), then through the route's parser. Nothing may throw
// (nlohmann's type errors would escape as exceptions: libFuzzer reports them), failures must
// be Errors with the codes the routes promise, and what parses must keep the documented
// ranges and survive being written back as a body and parsed again unchanged.
#include <cstdint>
#include <string>
#include <string_view>

#include <boost/beast/core/detail/base64.hpp>

#include "api/parse.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::Errc;
using space::Json;
using space::fuzz::Check;
namespace api = space::api;
namespace core = space::core;

void CheckError(const space::Error& e, std::initializer_list<Errc> allowed, const char* what) {
  for (Errc c : allowed) {
    if (e.code == c) {
      Check(!e.message.empty(), "parse errors carry a message");
      return;
    }
  }
  Check(false, what);
}

Json Dumped(const Json& j) {
  // What the client would send: the body as text, parsed again.
  auto again = space::ParseJson(j.dump(-1, ' ', false, Json::error_handler_t::strict));
  Check(again.has_value(), "a re-serialized body parses");
  return *again;
}

bool SameCreate(const core::CreateSandboxRequest& a, const core::CreateSandboxRequest& b) {
  return a.template_ref == b.template_ref && a.snapshot_id == b.snapshot_id &&
         a.runtime == b.runtime && a.limits.memory_bytes == b.limits.memory_bytes &&
         a.limits.pids == b.limits.pids && a.limits.cpus == b.limits.cpus &&
         a.limits.disk_bytes == b.limits.disk_bytes && a.limits.nofile == b.limits.nofile &&
         a.env == b.env && a.metadata == b.metadata && a.network == b.network &&
         a.timeout_s == b.timeout_s && a.on_timeout == b.on_timeout &&
         a.idle_timeout_s == b.idle_timeout_s && a.snapshot_every_s == b.snapshot_every_s &&
         a.keep_last == b.keep_last;
}

void Create(const Json& body) {
  auto r = api::ParseCreate(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseCreate: invalid_argument only");
  Check(r->snapshot_id.empty() || r->template_ref.empty(), "template and snapshot exclusive");
  Check(r->timeout_s == -1 || (r->timeout_s >= 0 && r->timeout_s <= 366 * 24 * 3600),
        "timeout within a year");
  Check(r->idle_timeout_s >= 0 && r->idle_timeout_s <= 366 * 24 * 3600, "idle_timeout within a year");
  Check(r->limits.memory_bytes >= 0 && r->limits.pids >= 0 && r->limits.disk_bytes >= 0 &&
            r->limits.nofile >= 0 && r->snapshot_every_s >= 0 && r->keep_last >= 0,
        "integer limits non-negative");
  Json out = {{"runtime", r->runtime},
              {"limits", {{"memory_bytes", r->limits.memory_bytes},
                          {"pids", r->limits.pids},
                          {"cpus", r->limits.cpus},
                          {"disk_bytes", r->limits.disk_bytes},
                          {"nofile", r->limits.nofile}}},
              {"env", r->env},
              {"metadata", r->metadata},
              {"network", r->network},
              {"on_timeout", r->on_timeout},
              {"idle_timeout", r->idle_timeout_s},
              {"snapshot_every", r->snapshot_every_s},
              {"keep_last", r->keep_last}};
  if (!r->snapshot_id.empty()) {
    out["snapshot"] = r->snapshot_id;
  } else {
    out["template"] = r->template_ref;
  }
  if (r->timeout_s >= 0) out["timeout"] = r->timeout_s;
  auto again = api::ParseCreate(Dumped(out));
  Check(again.has_value() && SameCreate(*r, *again), "ParseCreate round trip");
}

void Command(const Json& body) {
  auto r = api::ParseCommand(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseCommand: invalid_argument only");
  Check(r->argv.empty() != r->shell.empty(), "exactly one of argv and cmd");
  Check(r->timeout_ms >= 0 && r->timeout_ms <= 10'000'000'000, "timeout within 1e7 s");
  Check(!r->pty || (r->pty->cols >= 1 && r->pty->cols <= 4096 && r->pty->rows >= 1 &&
                    r->pty->rows <= 4096),
        "pty size 1..4096");
  Json out = {{"env", r->env}, {"cwd", r->cwd}, {"stdin", r->stdin}};
  if (!r->user.empty() || space::JsonField(body, "user")) out["user"] = r->user;
  if (!r->argv.empty()) {
    out["argv"] = r->argv;
  } else {
    out["cmd"] = r->shell;
  }
  if (r->pty) out["pty"] = {{"cols", r->pty->cols}, {"rows", r->pty->rows}};
  auto again = api::ParseCommand(Dumped(out));
  Check(again.has_value(), "ParseCommand accepts its own result");
  Check(again->argv == r->argv && again->shell == r->shell && again->env == r->env &&
            again->cwd == r->cwd && again->user == r->user && again->stdin == r->stdin &&
            again->pty.has_value() == r->pty.has_value(),
        "ParseCommand round trip");
}

void Signal(const Json& body) {
  auto r = api::ParseSignal(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseSignal: invalid_argument only");
  Check(*r >= 1 && *r <= 64, "signal 1..64");
  auto again = api::ParseSignal(Json{{"signal", *r}});
  Check(again.has_value() && *again == *r, "ParseSignal round trip");
}

void Resize(const Json& body) {
  auto r = api::ParsePtySize(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParsePtySize: invalid_argument only");
  Check(r->cols >= 1 && r->cols <= 4096 && r->rows >= 1 && r->rows <= 4096, "pty size 1..4096");
}

void Fork(const Json& body) {
  auto r = api::ParseForkCount(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseForkCount: invalid_argument only");
  Check(*r >= 0 && *r <= 1000000, "fork count clamped to 0..1e6");
}

void Timeout(const Json& body) {
  auto r = api::ParseTimeout(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseTimeout: invalid_argument only");
  Check(r->seconds >= 0, "timeout non-negative");
}

void Rename(const Json& body) {
  auto r = api::ParseRename(body);
  if (!r) return CheckError(r.error(), {Errc::kInvalidArgument}, "ParseRename: invalid_argument only");
  auto again = api::ParseRename(Dumped(Json{{"from", r->first}, {"to", r->second}}));
  Check(again.has_value() && *again == *r, "ParseRename round trip");
}

std::string Base64(std::string_view s) {
  namespace b64 = boost::beast::detail::base64;
  std::string out(b64::encoded_size(s.size()), '\0');
  out.resize(b64::encode(out.data(), s.data(), s.size()));
  return out;
}

void Build(std::string_view text) {
  auto body = space::ParseJson(text);
  if (!body || !body->is_object()) return;  // the route answers 400 before parsing
  auto r = api::ParseBuild(*body);
  if (!r) {
    return CheckError(r.error(), {Errc::kInvalidArgument, Errc::kTooLarge},
                      "ParseBuild: invalid_argument or too_large only");
  }
  uint64_t total = 0;
  Json context = Json::object();
  for (const auto& [path, bytes] : r->context) {
    total += bytes.size();
    context[path] = Base64(bytes);
  }
  Check(total <= core::kMaxBuildContextBytes, "build context within 16 MiB");
  Json out = {{"name", r->name},
              {"tag", r->tag},
              {"spec", r->spec},
              {"tarball_path", r->tarball_path},
              {"oci_archive_path", r->oci_archive_path},
              {"directory", r->directory},
              {"context", context},
              {"build_args", r->build_args},
              {"network", r->network}};
  auto again = api::ParseBuild(Dumped(out));
  Check(again.has_value() && again->name == r->name && again->tag == r->tag &&
            again->spec == r->spec && again->context == r->context &&
            again->build_args == r->build_args && again->network == r->network &&
            again->tarball_path == r->tarball_path && again->directory == r->directory &&
            again->oci_archive_path == r->oci_archive_path,
        "ParseBuild round trip (context through base64)");
}

void Mint(const Json& body, const api::Principal& who) {
  auto r = api::ParseMint(who, body);
  if (!r) {
    return CheckError(r.error(), {Errc::kInvalidArgument, Errc::kPermissionDenied},
                      "ParseMint: invalid_argument or permission_denied only");
  }
  Check(r->scopes != 0 && (r->scopes & ~space::auth::kAllSandboxScopes) == 0, "minted scopes known");
  Check(r->expires_s >= 0, "ttl non-negative");
  if (who.is_token()) {
    Check((r->scopes & ~who.claims.scopes) == 0, "never broader than the caller's token");
    Check(who.claims.command_id.empty() || r->command_id == who.claims.command_id,
          "a command-bound caller mints for its command only");
  }
  Check(r->command_id.empty() || (r->scopes & ~space::auth::kAttachScopes) == 0,
        "a command-bound token carries attach scopes only");
}

api::Principal Operator() {
  api::Principal p;
  p.kind = api::Principal::Kind::kOperator;
  p.key_name = "fuzz";
  return p;
}

api::Principal Token(space::auth::Scopes scopes, std::string command_id) {
  api::Principal p;
  p.kind = api::Principal::Kind::kToken;
  p.claims.sandbox_id = "sb-0123456789abcdef";
  p.claims.scopes = scopes;
  p.claims.command_id = std::move(command_id);
  p.claims.expires_s = 1'900'000'000;
  return p;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0 || size > (1u << 20) + 1) return 0;  // ReadJson refuses bodies over 1 MiB
  const uint8_t route = data[0] % 12;
  std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (route == 7) {  // POST /v1/templates reads its own (larger) body
    Build(text);
    return 0;
  }
  auto body = api::ParseJsonBody(text);
  if (!body) {
    CheckError(body.error(), {Errc::kInvalidArgument}, "ParseJsonBody: invalid_argument only");
    return 0;
  }
  Check(body->is_object(), "ParseJsonBody returns objects only");
  switch (route) {
    case 0: Create(*body); break;                      // POST /v1/sandboxes
    case 1: Command(*body); break;                     // POST .../commands
    case 2: Signal(*body); break;                      // POST .../commands/{cid}/signal
    case 3: Resize(*body); break;                      // POST .../commands/{cid}/resize
    case 4: Fork(*body); break;                        // POST .../fork
    case 5: Timeout(*body); break;                     // POST .../timeout
    case 6: Rename(*body); break;                      // POST .../files:rename
    case 8: Mint(*body, Operator()); break;            // POST .../tokens (operator)
    case 9:                                            // POST .../tokens (a sandbox token)
      Mint(*body, Token(space::auth::kFilesRead | space::auth::kCommandsRead |
                            space::auth::kCommandsWrite, ""));
      break;
    case 10:                                           // POST .../tokens (an attach token)
      Mint(*body, Token(space::auth::kAttachScopes, "cmd-0123456789abcdef"));
      break;
    case 11:                                           // POST /v1/keys
      (void)space::JsonStringOr(*body, "name", "");
      break;
  }
  return 0;
}
