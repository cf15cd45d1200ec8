// agent/log: the agent's tiny stderr logger.
//
// The agent is a static binary that runs as PID 1 inside sandboxes, so it carries no
// logging library: one printf-style line per event to stderr, prefixed with the level.
// Thread-safe as far as stdio is (the agent is single-threaded anyway).
#pragma once

#include <cstdarg>
#include <cstdio>

namespace space::agent {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Messages below this level are dropped. Set once at start-up (--verbose).
inline LogLevel g_log_level = LogLevel::kInfo;

__attribute__((format(printf, 2, 3))) inline void Log(LogLevel level, const char* fmt, ...) {
  if (level < g_log_level) return;
  static const char* const kNames[] = {"debug", "info", "warn", "error"};
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "space-agent %s: %s\n", kNames[static_cast<int>(level)], line);
}

#define AGENT_LOG_DEBUG(...) ::space::agent::Log(::space::agent::LogLevel::kDebug, __VA_ARGS__)
#define AGENT_LOG_INFO(...) ::space::agent::Log(::space::agent::LogLevel::kInfo, __VA_ARGS__)
#define AGENT_LOG_WARN(...) ::space::agent::Log(::space::agent::LogLevel::kWarn, __VA_ARGS__)
#define AGENT_LOG_ERROR(...) ::space::agent::Log(::space::agent::LogLevel::kError, __VA_ARGS__)

}  // namespace space::agent
