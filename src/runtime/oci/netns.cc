// netns: the init pid from the runtime's state file, checked against /proc (see netns.h).
#include "runtime/oci/netns.h"

#include "common/json.h"
#include "sys/sys.h"

namespace space::runtime::oci {
namespace {

// Field 22 of /proc/<pid>/stat (start time in clock ticks since boot) and field 3 (state).
// The command name (field 2) may hold spaces and parentheses: parse after its last ')'.
bool ProcStat(int64_t pid, int64_t* start_ticks, char* state) {
  auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return false;
  std::vector<std::string> f;
  size_t pos = close + 2;
  while (pos < stat->size() && f.size() < 20) {
    size_t sp = stat->find(' ', pos);
    if (sp == std::string::npos) sp = stat->size();
    f.push_back(stat->substr(pos, sp - pos));
    pos = sp + 1;
  }
  if (f.size() < 20) return false;
  *state = f[0].empty() ? '?' : f[0][0];        // field 3
  *start_ticks = std::strtoll(f[19].c_str(), nullptr, 10);  // field 22
  return true;
}

// True if one line of /proc/<pid>/cgroup ("N:controllers:/path") has `rel` as its path.
bool InCgroup(int64_t pid, const std::string& rel) {
  auto text = sys::ReadFile("/proc/" + std::to_string(pid) + "/cgroup");
  if (!text) return false;
  size_t pos = 0;
  while (pos < text->size()) {
    size_t nl = text->find('\n', pos);
    if (nl == std::string::npos) nl = text->size();
    std::string_view line(text->data() + pos, nl - pos);
    size_t colon = line.find(':', line.find(':') + 1);
    if (colon != std::string_view::npos) {
      std::string_view path = line.substr(colon + 1);
      if (path == rel || (path.size() > rel.size() && path.substr(0, rel.size()) == rel &&
                          path[rel.size()] == '/'))
        return true;
    }
    pos = nl + 1;
  }
  return false;
}

}  // namespace

Result<int64_t> InitPid(const std::string& state_dir, const std::string& cgroup_rel) {
  const std::string id = state_dir.substr(state_dir.rfind('/') + 1);
  std::optional<std::string> text;
  for (const char* name : {"/status", "/state.json"}) {
    if (auto t = sys::ReadFile(state_dir + name)) {
      text = std::move(*t);
      break;
    }
  }
  if (!text) return Fail(Errc::kConflict, "instance " + id + " is not running");
  auto j = ParseJson(*text);
  if (!j || !j->is_object()) return Fail(Errc::kInternal, "oci: unreadable runtime state of " + id);
  int64_t pid = JsonIntOr(*j, "pid", JsonIntOr(*j, "init_process_pid", 0));
  // crun keeps the start time as "process-start-time", runc as "init_process_start".
  int64_t want_start = JsonIntOr(*j, "process-start-time", JsonIntOr(*j, "init_process_start", -1));
  if (pid <= 1) return Fail(Errc::kConflict, "instance " + id + " has no init process");
  int64_t start = 0;
  char state = '?';
  if (!ProcStat(pid, &start, &state) || state == 'Z' || state == 'X' ||
      (want_start >= 0 && start != want_start) || !InCgroup(pid, cgroup_rel))
    return Fail(Errc::kConflict, "instance " + id + " is not running (its init process is gone)");
  return pid;
}

Result<std::string> InitNetNamespace(const std::string& state_dir, const std::string& cgroup_rel) {
  auto pid = InitPid(state_dir, cgroup_rel);
  if (!pid) return tl::unexpected(pid.error());
  return "/proc/" + std::to_string(*pid) + "/ns/net";
}

}  // namespace space::runtime::oci
