#include "common/common.h"

#include <sys/random.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>

namespace space {

std::string_view ErrcName(Errc c) {
  switch (c) {
    case Errc::kInvalidArgument: return "invalid_argument";
    case Errc::kNotFound: return "not_found";
    case Errc::kConflict: return "conflict";
    case Errc::kUnauthenticated: return "unauthenticated";
    case Errc::kPermissionDenied: return "permission_denied";
    case Errc::kResourceExhausted: return "resource_exhausted";
    case Errc::kUnavailable: return "unavailable";
    case Errc::kDeadlineExceeded: return "deadline_exceeded";
    case Errc::kTooLarge: return "too_large";
    case Errc::kInternal: return "internal";
    case Errc::kInsufficientStorage: return "insufficient_storage";
  }
  return "internal";
}

Errc ErrcFromName(std::string_view name) {
  for (Errc c : {Errc::kInvalidArgument, Errc::kNotFound, Errc::kConflict, Errc::kUnauthenticated,
                 Errc::kPermissionDenied, Errc::kResourceExhausted, Errc::kUnavailable,
                 Errc::kDeadlineExceeded, Errc::kTooLarge, Errc::kInternal,
                 Errc::kInsufficientStorage}) {
    if (ErrcName(c) == name) return c;
  }
  return Errc::kInternal;
}

Error Error::Wrap(std::string_view context) && {
  message = std::string(context) + ": " + message;
  return std::move(*this);
}
Error Error::Wrap(std::string_view context) const& {
  Error e = *this;
  return std::move(e).Wrap(context);
}

Errc ErrcFromErrno(int err) {
  switch (err) {
    case ENOENT: case ESRCH: return Errc::kNotFound;
    case EEXIST: case ENOTEMPTY: case EBUSY: return Errc::kConflict;
    case EACCES: case EPERM: case EROFS: return Errc::kPermissionDenied;
    case EINVAL: case ENOTDIR: case EISDIR: case ENAMETOOLONG: case ELOOP: case EXDEV:
      return Errc::kInvalidArgument;
    case ENOSPC: case EDQUOT: case EMFILE: case ENFILE: case ENOMEM: case EAGAIN:
      return Errc::kResourceExhausted;
    case EFBIG: return Errc::kTooLarge;
    case ETIMEDOUT: return Errc::kDeadlineExceeded;
    default: return Errc::kInternal;
  }
}

tl::unexpected<Error> ErrnoFail(std::string_view what, int err) {
  return tl::unexpected<Error>(
      Error{ErrcFromErrno(err), err, std::string(what) + ": " + std::strerror(err)});
}

void CheckFailed(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "SPACE_CHECK failed: %s at %s:%d\n", cond, file, line);
  std::abort();
}

namespace {
constexpr char kBase32[] = "abcdefghijklmnopqrstuvwxyz234567";
}

std::string NewId(std::string_view prefix) {
  unsigned char raw[16];
  size_t got = 0;
  while (got < sizeof raw) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  std::string id(prefix);
  id += '-';
  for (unsigned char c : raw) id += kBase32[c & 31];
  return id;
}

std::string UuidText(const unsigned char (&raw)[16]) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[raw[i] >> 4];
    out += kHex[raw[i] & 15];
  }
  return out;
}

std::string NewUuidV4() {
  unsigned char raw[16];
  for (size_t got = 0; got < sizeof raw;) {
    ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
  }
  raw[6] = static_cast<unsigned char>((raw[6] & 0x0f) | 0x40);  // version 4
  raw[8] = static_cast<unsigned char>((raw[8] & 0x3f) | 0x80);  // RFC 4122 variant
  return UuidText(raw);
}

bool IsUuidText(std::string_view s) {
  if (s.size() != 36) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

bool IsValidId(std::string_view id, std::string_view prefix) {
  if (id.size() != prefix.size() + 17) return false;
  if (id.substr(0, prefix.size()) != prefix || id[prefix.size()] != '-') return false;
  for (char c : id.substr(prefix.size() + 1)) {
    if (!((c >= 'a' && c <= 'z') || (c >= '2' && c <= '7'))) return false;
  }
  return true;
}

int64_t NowUnixMillis() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string FormatRfc3339(int64_t unix_millis) {
  time_t secs = static_cast<time_t>(unix_millis / 1000);
  struct tm tm;
  gmtime_r(&secs, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(unix_millis % 1000));
  return buf;
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

std::string HexEncode(std::string_view bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

int64_t ParseDurationMillis(std::string_view s) {
  if (s.empty()) return -1;
  size_t i = 0;
  int64_t v = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
    if (v > (INT64_MAX / 10) - 10) return -1;
    v = v * 10 + (s[i] - '0');
    ++i;
  }
  if (i == 0) return -1;
  std::string_view unit = s.substr(i);
  int64_t scale = 0;
  if (unit.empty() || unit == "s") {
    scale = 1000;
  } else if (unit == "ms") {
    scale = 1;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 3600 * 1000;
  } else {
    return -1;
  }
  if (v > INT64_MAX / scale) return -1;  // too long to count in milliseconds
  return v * scale;
}

}  // namespace space
