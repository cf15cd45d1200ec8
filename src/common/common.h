// common: the vocabulary every SPACE subsystem shares — errors, results, ids and clocks.
//
// Nothing here owns resources or touches the kernel beyond reading clocks and the
// system entropy source. Everything is thread-safe (no shared mutable state).
#pragma once

#include <tl/expected.hpp>

#include <cerrno>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace space {

// The error categories the API can tell apart. Each maps to exactly one HTTP status
// (see api/), one CLI exit message and one agent-protocol error code string.
enum class Errc {
  kInvalidArgument,
  kNotFound,
  kConflict,          // wrong state, already exists
  kUnauthenticated,
  kPermissionDenied,
  kResourceExhausted,
  kUnavailable,
  kDeadlineExceeded,
  kTooLarge,
  kInternal,
  kInsufficientStorage,  // the host has no room (disk or memory) for this: HTTP 507
};

std::string_view ErrcName(Errc c);             // "invalid_argument", ...
Errc ErrcFromName(std::string_view name);      // unknown names map to kInternal

struct Error {
  Errc code = Errc::kInternal;
  int sys_errno = 0;
  std::string message;

  // User-provided constructors on purpose: g++ 12 destroys *aggregate* temporaries twice
  // when they appear inside a co_await expression (a double free in the HTTP server).
  Error() = default;
  Error(Errc c, int err, std::string msg) : code(c), sys_errno(err), message(std::move(msg)) {}

  // Prefixes context: Error{.., "EPERM"}.Wrap("mount /proc") -> "mount /proc: EPERM".
  Error Wrap(std::string_view context) &&;
  Error Wrap(std::string_view context) const&;
  std::string ToString() const { return message; }
};

template <class T>
using Result = tl::expected<T, Error>;
using Status = Result<void>;

inline tl::unexpected<Error> Fail(Errc code, std::string message) {
  return tl::unexpected<Error>(Error{code, 0, std::move(message)});
}
// An error from errno (or an explicit errno value): "what: strerror(errno)".
tl::unexpected<Error> ErrnoFail(std::string_view what, int err = errno);
// Classifies an errno into an Errc (ENOENT -> kNotFound, EEXIST -> kConflict, ...).
Errc ErrcFromErrno(int err);

inline Status Ok() { return {}; }

// Evaluates a Result expression; on error returns it (optionally wrapped) from the caller.
#define SPACE_TRY(expr)                                            \
  do {                                                             \
    auto&& space_try_r_ = (expr);                                  \
    if (!space_try_r_) return tl::unexpected(std::move(space_try_r_).error()); \
  } while (0)
#define SPACE_TRY_WRAP(expr, ctx)                                                   \
  do {                                                                             \
    auto&& space_try_r_ = (expr);                                                  \
    if (!space_try_r_) return tl::unexpected(std::move(space_try_r_).error().Wrap(ctx)); \
  } while (0)

// Aborts with a message when a broken invariant is found (never for bad input).
#define SPACE_CHECK(cond)                                                     \
  do {                                                                        \
    if (!(cond)) ::space::CheckFailed(#cond, __FILE__, __LINE__);             \
  } while (0)
[[noreturn]] void CheckFailed(const char* cond, const char* file, int line);

// Ids: a short prefix plus 16 lowercase base32 characters of system entropy,
// e.g. "sb-k3j5...". Valid ids match [a-z]+-[a-z2-7]{16}.
std::string NewId(std::string_view prefix);
bool IsValidId(std::string_view id, std::string_view prefix);
// UUIDs in their 8-4-4-4-12 lowercase text form: a random version 4 one, and one made from
// 16 bytes as they are (e.g. the start of a digest, for an id that must be a UUID and
// stay the same for the same content). IsUuidText checks the form only.
std::string NewUuidV4();
std::string UuidText(const unsigned char (&raw)[16]);
bool IsUuidText(std::string_view s);

// Clocks.
int64_t NowUnixMillis();          // wall clock, for records shown to users
int64_t MonotonicNanos();         // for durations and deadlines
std::string FormatRfc3339(int64_t unix_millis);

// Small string helpers.
bool StartsWith(std::string_view s, std::string_view prefix);
std::string HexEncode(std::string_view bytes);

// Parses "30s", "1500ms", "2m", "10" (seconds) into milliseconds; nullopt-like -1 on error.
int64_t ParseDurationMillis(std::string_view s);

}  // namespace space
