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

namespace {
Status Unsupported(const Runtime& rt, const char* what) {
  return Fail(Errc::kInvalidArgument,
              "runtime " + std::string(rt.Name()) + " does not support " + what);
}
}  // namespace

Status Runtime::Snapshot(const std::string&, const std::string&) {
  return Unsupported(*this, "full snapshots");
}
Status Runtime::DeleteSnapshot(const std::string&) { return Ok(); }
Result<int64_t> Runtime::SnapshotSize(const std::string& snapshot_id) const {
  return Fail(Errc::kNotFound, "no snapshot " + snapshot_id);
}
Result<std::string> Runtime::NetNamespacePath(const std::string&) {
  return Fail(Errc::kUnavailable,
              "runtime " + std::string(Name()) + " has no network namespace on the host");
}
Status Runtime::Suspend(const std::string&) { return Unsupported(*this, "suspend with processes"); }
Status Runtime::Wake(const InstanceSpec&) { return Unsupported(*this, "wake with processes"); }

}  // namespace space::runtime
