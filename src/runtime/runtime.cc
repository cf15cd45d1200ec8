#include "runtime/runtime.h"

namespace space::runtime {

std::string_view InstanceStateName(InstanceState s) {
  switch (s) {
    case InstanceState::kRunning: return "running";
    case InstanceState::kPaused: return "paused";
    case InstanceState::kStopped: return "stopped";
    case InstanceState::kMissing: return "missing";
  }
  return "missing";
}

}  // namespace space::runtime
