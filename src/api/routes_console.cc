// The web console (docs/console.md): its pages under /ui/, and its login.
//
// Outside the route table by design, like a sandbox's ports: /ui/ is a web app, not part of
// the API that openapi.json describes. The pages are files the daemon loaded at start
// (ServerOptions::console_assets); any other path under /ui/ without a file extension is
// one of the app's own routes and gets index.html. POST /ui/login takes the form field
// api-key and answers with the session cookie (HttpOnly, SameSite=Strict) and the CSRF
// token; POST /ui/logout ends the session; GET /ui/session tells the page who it is.
#include "api/console_sessions.h"
#include "api/http.h"

namespace space::api {

namespace {

std::string ContentType(const std::string& path) {
  static const std::pair<const char*, const char*> kTypes[] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".mjs", "text/javascript; charset=utf-8"}, {".css", "text/css; charset=utf-8"},
      {".svg", "image/svg+xml"}, {".png", "image/png"}, {".ico", "image/x-icon"},
      {".json", "application/json"}, {".map", "application/json"}, {".txt", "text/plain; charset=utf-8"},
      {".woff2", "font/woff2"}};
  for (const auto& [ext, type] : kTypes) {
    const std::string e = ext;
    if (path.size() >= e.size() && path.compare(path.size() - e.size(), e.size(), e) == 0) return type;
  }
  return "application/octet-stream";
}

// What every console answer carries: nothing but this host, no framing, no sniffing.
std::vector<std::pair<std::string, std::string>> PageHeaders() {
  return {{"Content-Security-Policy",
           "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
           "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"},
          {"X-Content-Type-Options", "nosniff"},
          {"X-Frame-Options", "DENY"},
          {"Referrer-Policy", "same-origin"},
          {"Cache-Control", "no-cache"}};
}

bool WantsJson(const Ctx& ctx) {
  return ctx.Header(http::field::accept).find("application/json") != std::string::npos ||
         ctx.Header(http::field::content_type).find("application/json") != std::string::npos;
}

// Secure over TLS, and always behind a TLS proxy (--behind-tls-proxy).
std::string SessionCookie(const Ctx& ctx, std::string_view name, const std::string& value,
                          int64_t max_age, bool http_only) {
  std::string c = std::string(name) + "=" + value + "; Path=/; SameSite=Strict; Max-Age=" +
                  std::to_string(max_age);
  if (http_only) c += "; HttpOnly";
  if (ctx.opts->console_secure_cookies || ctx.conn.tls) c += "; Secure";
  return c;
}

Awaitable<void> Redirect(Ctx& ctx, const std::string& to,
                         std::vector<std::pair<std::string, std::string>> headers = {}) {
  headers.emplace_back("Location", to);
  for (auto& h : PageHeaders()) headers.push_back(h);
  co_await ctx.ReplyBytes(303, "", "text/plain", headers);
}

Awaitable<void> ServeAsset(Ctx& ctx) {
  const auto& assets = ctx.opts->console_assets;
  std::string rel = ctx.path.size() > 3 ? ctx.path.substr(3) : "/";  // after "/ui"
  if (rel.empty() || rel == "/") rel = "/index.html";
  auto it = assets.find(rel);
  if (it == assets.end()) {
    const std::string last = rel.substr(rel.rfind('/') + 1);
    if (last.find('.') != std::string::npos) {
      co_await ctx.ReplyError(Error{Errc::kNotFound, 0, "no console file " + ctx.path});
      co_return;
    }
    it = assets.find("/index.html");  // an app route: the app decides what it shows
  }
  if (it == assets.end()) {
    co_await ctx.ReplyBytes(404,
                            "The web console was not built into this spaced: build the "
                            "space_console target (it needs node and npm).\n",
                            "text/plain; charset=utf-8");
    co_return;
  }
  std::string body = ctx.method == "HEAD" ? std::string() : it->second;
  co_await ctx.ReplyBytes(200, std::move(body), ContentType(it->first), PageHeaders());
}

}  // namespace

Awaitable<bool> RouteConsole(Ctx& ctx) {
  const auto& s = ctx.segments;
  if (s.empty() || s[0] != "ui") co_return false;
  ctx.route = "/ui";
  core::Platform* p = ctx.platform;
  ConsoleSessions* sessions = ctx.sessions;
  const int64_t now = NowUnixMillis() / 1000;
  const bool json = WantsJson(ctx);

  if (s.size() == 2 && s[1] == "login" && ctx.method == "POST") {
    // Login CSRF: a login form posted from another site is refused.
    const std::string origin = ctx.Header(http::field::origin);
    if (!origin.empty() && !SameOrigin(origin, ctx.Header(http::field::host))) {
      co_await ctx.ReplyError(Error{Errc::kPermissionDenied, 0, "login from another origin refused"});
      co_return true;
    }
    auto body = co_await ctx.ReadBody(64 << 10);
    if (!body) {
      co_await ctx.ReplyError(body.error());
      co_return true;
    }
    std::optional<std::string> key;
    if (ctx.Header(http::field::content_type).find("application/json") != std::string::npos) {
      auto j = ParseJson(*body);
      if (j && j->is_object()) key = JsonStringOr(*j, "api-key", "");
    } else {
      key = FormValue(*body, "api-key");
    }
    std::optional<store::ApiKeyRecord> rec;
    if (key && !key->empty() && !auth::LooksLikeToken(*key)) rec = p->FindApiKey(*key);
    if (!rec) {
      const std::string why = key && auth::LooksLikeToken(*key)
                                  ? "the console takes an operator API key, not a sandbox token"
                                  : "invalid API key";
      if (json) {
        co_await ctx.Reply(401, ErrorBody(Error{Errc::kUnauthenticated, 0, why}));
      } else {
        co_await Redirect(ctx, "/ui/login?error=invalid-key");
      }
      co_return true;
    }
    auto made = sessions->Create(rec->hash, rec->name, now);
    if (!made) {
      co_await ctx.ReplyError(made.error());
      co_return true;
    }
    ConsoleSession session = std::move(*made);
    std::vector<std::pair<std::string, std::string>> headers = {
        {"Set-Cookie", SessionCookie(ctx, kSessionCookie, session.id, sessions->max_age_s(), true)}};
    headers.emplace_back("Set-Cookie", SessionCookie(ctx, kCsrfCookie, session.csrf, sessions->max_age_s(), false));
    if (json) {
      Json body = {{"key_name", session.key_name}, {"csrf", session.csrf}};
      co_await ctx.Reply(200, body, headers);
    } else {
      co_await Redirect(ctx, "/ui/", headers);
    }
    co_return true;
  }

  if (s.size() == 2 && s[1] == "logout" && ctx.method == "POST") {
    auto id = CookieValue(ctx.Header(http::field::cookie), kSessionCookie);
    auto session = id ? sessions->Find(*id, now) : std::nullopt;
    if (session) {
      // Logging out is a change: it needs the token too (header, or the form's field).
      std::string csrf = ctx.Header(std::string_view(kCsrfHeader));
      if (csrf.empty()) {
        auto body = co_await ctx.ReadBody(64 << 10);
        if (body) csrf = FormValue(*body, "csrf").value_or("");
      }
      if (!auth::SecretEquals(csrf, session->csrf)) {
        co_await ctx.ReplyError(Error{Errc::kPermissionDenied, 0, "missing or wrong CSRF token"});
        co_return true;
      }
      sessions->Remove(session->id);
    }
    std::vector<std::pair<std::string, std::string>> headers = {
        {"Set-Cookie", SessionCookie(ctx, kSessionCookie, "", 0, true)},
        {"Set-Cookie", SessionCookie(ctx, kCsrfCookie, "", 0, false)}};
    if (json) {
      Json body = {{"logged_out", true}};
      co_await ctx.Reply(200, body, headers);
    } else {
      co_await Redirect(ctx, "/ui/login", headers);
    }
    co_return true;
  }

  if (s.size() == 2 && s[1] == "session" && ctx.method == "GET") {
    if (ctx.opts->no_auth) {
      Json body = {{"key_name", "no-auth"}, {"csrf", ""}, {"no_auth", true}};
      const auto headers = PageHeaders();
      co_await ctx.Reply(200, body, headers);
      co_return true;
    }
    auto id = CookieValue(ctx.Header(http::field::cookie), kSessionCookie);
    auto session = id ? sessions->Find(*id, now) : std::nullopt;
    if (session && !p->FindApiKeyByHash(session->key_hash)) {
      sessions->Remove(session->id);
      session.reset();
    }
    if (!session) {
      const Json body = ErrorBody(Error{Errc::kUnauthenticated, 0, "not logged in"});
      const auto headers = PageHeaders();
      co_await ctx.Reply(401, body, headers);
      co_return true;
    }
    Json body = {{"key_name", session->key_name}, {"csrf", session->csrf}, {"no_auth", false}};
    const auto headers = PageHeaders();
    co_await ctx.Reply(200, body, headers);
    co_return true;
  }

  if (ctx.method == "GET" || ctx.method == "HEAD") {
    co_await ServeAsset(ctx);
    co_return true;
  }
  const Json body = ErrorBody(Error{Errc::kInvalidArgument, 0, "method not allowed: " + ctx.path});
  const std::vector<std::pair<std::string, std::string>> headers = {{"Allow", "GET, HEAD"}};
  co_await ctx.Reply(405, body, headers);
  co_return true;
}

}  // namespace space::api
