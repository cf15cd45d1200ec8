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

Json CapabilitiesToJson(const Capabilities& c) {
  return Json{{"pause", c.pause},
              {"pause_keeps_memory", c.pause_keeps_memory},
              {"suspend_keeps_processes", c.suspend_keeps_processes},
              {"snapshot_kinds", c.snapshot_kinds},
              {"own_disk", c.own_disk},
              {"network", c.network},
              {"volumes", c.volumes},
              {"snapshot_with_volumes", c.snapshot_with_volumes}};
}

Capabilities CapabilitiesFromJson(const Json& j) {
  Capabilities c;
  c.pause = JsonBoolOr(j, "pause", c.pause);
  c.pause_keeps_memory = JsonBoolOr(j, "pause_keeps_memory", c.pause && c.pause_keeps_memory);
  c.suspend_keeps_processes = JsonBoolOr(j, "suspend_keeps_processes", false);
  c.own_disk = JsonBoolOr(j, "own_disk", false);
  c.network = JsonBoolOr(j, "network", false);
  c.snapshot_kinds.clear();
  if (const Json* k = JsonField(j, "snapshot_kinds"); k && k->is_array()) {
    for (const auto& v : *k) {
      if (v.is_string() && (v == "filesystem" || v == "full")) c.snapshot_kinds.push_back(v);
    }
  } else {
    c.snapshot_kinds = {c.own_disk ? "full" : "filesystem"};
  }
  return c;
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
