// cli/exec_io: what `space exec` and its terminal form (cmd_tty.cc) share: copying our stdin
// to a running command, and turning the command's end into our exit status. Internal to the
// space executable.
#pragma once

#include <string>
#include <thread>

#include "cli/client.h"
#include "sys/sys.h"

namespace space::cli {

// Copies our stdin to command `cid` on its own thread, from construction until our EOF
// (which closes the command's stdin: ^D on a terminal) or destruction (which stops it).
class StdinPump {
 public:
  StdinPump(client::Client& c, std::string id, std::string cid);
  ~StdinPump();
  StdinPump(const StdinPump&) = delete;
  StdinPump& operator=(const StdinPump&) = delete;
  // kInternal when the pump could not start (no pipe).
  Status status() const { return status_; }

 private:
  Status status_;
  sys::UniqueFd stop_r_, stop_w_;
  std::thread thread_;
};

// Our exit status for a followed command: its own (Client::ExitCodeOf) after saying on stderr
// why it did not run or was lost; 128+SIGPIPE when our output broke (or the stream stopped);
// an error reported as such.
int ExitStatusOf(const Result<Json>& command, bool output_broken, const std::string& cid);

}  // namespace space::cli
