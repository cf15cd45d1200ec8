// qmp: a small blocking client of QEMU's QMP monitor (JSON lines over a unix socket).
//
// Connect() reads the greeting and negotiates capabilities; Execute() sends one command
// and waits for its return, collecting asynchronous events on the way (WaitEvent() looks
// at them). SendFd() passes a file descriptor (getfd), which lets the daemon open the
// snapshot files itself and QEMU, running as an unprivileged uid, only read or write them.
// Not thread-safe: one client per caller. Internal to runtime/microvm.
#pragma once

#include <deque>
#include <string>

#include "common/common.h"
#include "common/json.h"
#include "sys/sys.h"

namespace space::runtime::microvm {

class QmpClient {
 public:
  // Retries until `timeout_ms` while the socket does not accept yet.
  [[nodiscard]] static Result<QmpClient> Connect(const std::string& socket_path, int64_t timeout_ms);
  QmpClient() = default;
  QmpClient(QmpClient&&) = default;
  QmpClient& operator=(QmpClient&&) = default;

  // The command's "return" value; a QMP error becomes kInternal with QEMU's description.
  [[nodiscard]] Result<Json> Execute(const std::string& command, const Json& args = Json(),
                                     int64_t timeout_ms = 30000);
  // getfd: QEMU keeps `fd` under `name` (for "fd:NAME" migration URIs).
  [[nodiscard]] Status SendFd(const std::string& name, int fd, int64_t timeout_ms = 10000);
  // Waits for an event (already received or arriving within timeout_ms); returns its data.
  [[nodiscard]] Result<Json> WaitEvent(const std::string& name, int64_t timeout_ms);

 private:
  [[nodiscard]] Status SendLine(const std::string& line, int fd = -1);
  [[nodiscard]] Result<Json> ReadMessage(int64_t deadline_ns);
  [[nodiscard]] Result<Json> AwaitReturn(const std::string& what, int64_t timeout_ms);

  sys::UniqueFd fd_;
  std::string buf_;
  std::deque<Json> events_;
};

}  // namespace space::runtime::microvm
