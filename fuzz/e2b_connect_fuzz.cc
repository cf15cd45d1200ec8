// Fuzz target e2b_connect: what the E2B-compatible surface reads from a request body or
// header, through the real parsers (api/e2b/connect.h, api/e2b/parse.h).
//
// Input: one byte choosing the kind, then the bytes:
//   0  a server-streaming request body (application/connect+json): SingleMessage, then
//      ParseMessage, then process.Process/Start's and /Connect's parsers
//   1  a unary request body (application/json): ParseMessage, then every unary parser of
//      process.Process and filesystem.Filesystem
//   2  a control-plane body (POST /sandboxes, /connect, /timeout): ParseJsonBody, then
//      e2b::ParseCreate and TimeoutSeconds
//   3  a header or query value: BasicUser, MediaType, MultipartBoundary, ParseMetadataFilter,
//      proto3 base64 in both directions, an end-stream message carrying it
// Checks: no exceptions, errors with the codes the routes map, envelope and base64 round
// trips, and the ranges each parser promises.
#include <csignal>
#include <cstdint>
#include <string>
#include <string_view>

#include "api/e2b/connect.h"
#include "api/e2b/parse.h"
#include "fuzz/fuzz_util.h"

namespace {

using space::Errc;
using space::Json;
using space::fuzz::Check;
namespace rpc = space::api::e2b::connect;
namespace e2b = space::api::e2b;

void Start(const Json& msg) {
  auto r = e2b::ParseStart(msg);
  if (!r) {
    Check(r.error().code == Errc::kInvalidArgument, "ParseStart: invalid_argument only");
    return;
  }
  Check(!r->argv.empty() && !r->argv[0].empty(), "Start has a command");
  Check(r->cwd.empty() || r->cwd[0] == '/', "Start's cwd is absolute");
  Check(!r->pty || (r->pty->cols >= 1 && r->pty->cols <= 4096 && r->pty->rows >= 1 &&
                    r->pty->rows <= 4096),
        "pty size 1..4096");
}

void Selected(const Json& msg) {
  auto pid = e2b::SelectedPid(msg);
  if (!pid) {
    Check(pid.error().code == Errc::kInvalidArgument || pid.error().code == Errc::kNotFound,
          "SelectedPid: invalid_argument or not_found");
  }
}

void Unary(const Json& msg) {
  Selected(msg);
  if (auto in = e2b::ParseSendInput(msg); !in) {
    Check(in.error().code == Errc::kInvalidArgument, "SendInput: invalid_argument only");
  }
  if (auto sig = e2b::ParseSendSignal(msg)) {
    Check(*sig == SIGKILL || *sig == SIGTERM, "SendSignal: KILL or TERM only");
    const Json* v = rpc::Field(msg, "signal");
    Check(!v->is_number_integer() || v->get<int64_t>() == *sig, "SendSignal: the number sent");
  }
  if (auto size = e2b::ParseUpdate(msg)) {
    Check(size->cols >= 1 && size->cols <= 4096 && size->rows >= 1 && size->rows <= 4096,
          "Update: pty size 1..4096");
  }
  for (const char* name : {"path", "source", "destination"}) {
    if (auto p = e2b::PathField(msg, name)) Check(!p->empty() && (*p)[0] == '/', "paths are absolute");
  }
  int depth = e2b::ListDirDepth(msg);
  Check(depth >= 1 && depth <= 16, "ListDir depth 1..16");
  Start(msg);  // the SDK's Start message, sent to a unary URL
}

void Control(std::string_view text) {
  auto body = space::api::ParseJsonBody(text);
  if (!body) return;
  if (auto t = e2b::TimeoutSeconds(*body)) {
    Check(*t >= -1 && *t <= 366ll * 24 * 3600, "timeout -1 or within a year");
  }
  auto r = e2b::ParseCreate(*body);
  if (!r) {
    Check(r.error().code == Errc::kInvalidArgument, "e2b ParseCreate: invalid_argument only");
    return;
  }
  Check(!r->template_ref.empty() && r->template_ref.find(':') != std::string::npos,
        "templateID becomes a name:tag ref");
  Check(r->on_timeout == "pause" || r->on_timeout == "delete", "on_timeout pause or delete");
}

void Header(std::string_view in) {
  std::string s(in);
  (void)e2b::BasicUser(s);
  std::string media = e2b::MediaType(s);
  Check(media.size() <= s.size() && media.find(';') == std::string::npos, "MediaType drops parameters");
  std::string boundary = e2b::MultipartBoundary(s);
  Check(boundary.size() <= s.size() && boundary.find(';') == std::string::npos,
        "a boundary has no ';'");
  (void)e2b::ParseMetadataFilter(s);
  auto back = rpc::Base64Decode(rpc::Base64Encode(in));
  Check(back.has_value() && *back == in, "proto3 bytes round trip");
  if (auto dec = rpc::Base64Decode(in)) {
    Check(dec->size() <= in.size(), "base64 decoding shrinks");
  }
  // Error messages quote client input: the end-stream message must still be JSON.
  std::string end = rpc::EndStream(rpc::ErrorJson("invalid_argument", in));
  Check(end.size() >= 5 && static_cast<uint8_t>(end[0]) == rpc::kFlagEndStream, "end-stream flag");
  auto j = space::ParseJson(std::string_view(end).substr(5));
  Check(j.has_value() && j->is_object(), "the end-stream message is a JSON object");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t kind = data[0] % 4;
  std::string_view in(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (kind) {
    case 0: {
      auto payload = rpc::SingleMessage(in);
      if (!payload) {
        Check(payload.error().code == Errc::kInvalidArgument, "SingleMessage: invalid_argument only");
        // Whatever it is, wrapping it in one envelope makes it acceptable.
        if (in.size() <= rpc::kMaxMessage) {
          auto wrapped = rpc::SingleMessage(rpc::Envelope(0, in));
          Check(wrapped.has_value() && *wrapped == in, "Envelope/SingleMessage round trip");
        }
        return 0;
      }
      Check(rpc::Envelope(0, *payload) == in, "an accepted body is exactly one envelope");
      auto msg = rpc::ParseMessage(*payload);
      if (!msg) return 0;
      Check(msg->is_object(), "ParseMessage returns objects");
      Start(*msg);
      Selected(*msg);
      break;
    }
    case 1: {
      auto msg = rpc::ParseMessage(in);
      if (!msg) {
        Check(msg.error().code == Errc::kInvalidArgument, "ParseMessage: invalid_argument only");
        return 0;
      }
      Unary(*msg);
      break;
    }
    case 2:
      Control(in);
      break;
    case 3:
      Header(in);
      break;
  }
  return 0;
}
