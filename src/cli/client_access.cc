// Client: operator API keys and sandbox tokens (see client.h).
#include "cli/client.h"
#include "cli/client_internal.h"

namespace space::client {

using internal::ArrayField;
using internal::PathEscape;

Result<Json> Client::CreateKey(std::string_view name, bool e2b) {
  Json body = {{"name", std::string(name)}};
  if (e2b) body["format"] = "e2b";
  return Call("POST", "/v1/keys", body);
}

Result<Json> Client::ListKeys() {
  auto r = Call("GET", "/v1/keys");
  if (!r) return r;
  return ArrayField(*r, "keys");
}

Result<Json> Client::DeleteKey(std::string_view id_or_name) {
  return Call("DELETE", "/v1/keys/" + PathEscape(id_or_name));
}

Result<Json> Client::MintToken(std::string_view sandbox_id, const Json& body) {
  return Call("POST", "/v1/sandboxes/" + PathEscape(sandbox_id) + "/tokens", body);
}

Result<Json> Client::WhoAmI() { return Call("GET", "/v1/whoami"); }

Result<Json> Client::PortUrl(std::string_view sandbox_id, std::string_view port, int64_t ttl_s) {
  Json body = {{"port", std::string(port)}};
  if (ttl_s > 0) body["ttl"] = ttl_s;
  return Call("POST", "/v1/sandboxes/" + PathEscape(sandbox_id) + "/urls", body);
}

}  // namespace space::client
