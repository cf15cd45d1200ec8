// microvm: small helpers (names, hashes, files, processes, user namespaces).
#include <fcntl.h>
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <linux/if.h>
#include <linux/if_tun.h>
#include <sys/ioctl.h>

#include <cstring>
#include <fstream>
#include <thread>

#include "runtime/microvm/internal.h"

namespace space::runtime::microvm {

bool ValidName(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  }
  return s[0] != '.';
}

std::string Fnv64(std::string_view s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string FileIdentity(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return path + ":missing";
  return path + ":" + std::to_string(st.st_size) + ":" + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec);
}

// The last `max` bytes of a file, for error messages.
std::string Tail(const std::string& path, size_t max) {
  auto s = sys::ReadFile(path);
  if (!s || s->empty()) return "";
  std::string t = s->size() > max ? s->substr(s->size() - max) : *s;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  return t;
}

// Host TSC frequency for tsc_early_khz: under TCG the guest kernel otherwise hangs in TSC
// calibration in a good share of boots.
int64_t HostTscKhz() {
  if (auto f = sys::ReadFile("/sys/devices/system/cpu/cpu0/tsc_freq_khz")) {
    int64_t v = std::atoll(f->c_str());
    if (v > 0) return v;
  }
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (StartsWith(line, "cpu MHz")) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) return static_cast<int64_t>(std::atof(line.c_str() + colon + 1) * 1000);
    }
  }
  return 0;
}

bool PidAlive(pid_t pid, const std::string& marker) {
  if (pid <= 0) return false;
  auto stat = sys::ReadFile("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return false;
  size_t rp = stat->rfind(')');
  if (rp != std::string::npos && rp + 2 < stat->size() && (*stat)[rp + 2] == 'Z') return false;
  auto cmd = sys::ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
  return cmd && cmd->find(marker) != std::string::npos;
}

Status CopySparse(const std::string& from, const std::string& to) {
  sys::SpawnOptions o;
  o.argv = {"cp", "--sparse=always", "--reflink=auto", from, to};
  auto r = sys::RunChecked(o, 300000);
  if (!r) return tl::unexpected(r.error());
  return Ok();
}

// Runs argv in a new user namespace where host uids/gids shift..shift+65535 appear as
// 0..65535 and the program runs as that namespace's root, so tools that record ownership
// (mkfs.ext4 -d) see a shifted tree as root's. (util-linux's unshare needs newuidmap for
// such a map; a privileged parent can write it directly.)
Status RunInShiftedUserNs(const std::vector<std::string>& argv, uint32_t shift) {
  std::string exe;
  for (const char* dir : {"/usr/sbin/", "/sbin/", "/usr/bin/", "/bin/"}) {
    if (::access((dir + argv[0]).c_str(), X_OK) == 0) {
      exe = dir + argv[0];
      break;
    }
  }
  if (exe.empty()) return Fail(Errc::kNotFound, argv[0] + " is not installed");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int ready[2], go[2], errp[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(go, O_CLOEXEC) != 0 || ::pipe2(errp, O_CLOEXEC) != 0)
    return ErrnoFail("pipe");
  pid_t pid = ::fork();
  if (pid < 0) return ErrnoFail("fork");
  if (pid == 0) {
    // Child: async-signal-safe calls only.
    char c = 0;
    if (::unshare(CLONE_NEWUSER) != 0) ::_exit(120);
    if (::write(ready[1], &c, 1) != 1) ::_exit(121);
    if (::read(go[0], &c, 1) != 1) ::_exit(122);
    if (::setresgid(0, 0, 0) != 0 || ::setresuid(0, 0, 0) != 0) ::_exit(123);
    ::dup2(errp[1], 2);
    ::execv(exe.c_str(), cargv.data());
    ::_exit(127);
  }
  sys::UniqueFd r0(ready[0]), r1(ready[1]), g0(go[0]), g1(go[1]), e0(errp[0]), e1(errp[1]);
  r1.Reset();
  g0.Reset();
  e1.Reset();
  char c;
  bool mapped = false;
  if (::read(r0.get(), &c, 1) == 1) {
    const std::string proc = "/proc/" + std::to_string(pid);
    std::string map = "0 " + std::to_string(shift) + " 65536\n";
    auto write_map = [&](const std::string& file) {
      auto fd = sys::Open(proc + file, O_WRONLY);
      return fd && sys::WriteAll(fd->get(), map).has_value();
    };
    mapped = write_map("/uid_map") && write_map("/gid_map");
    if (mapped) mapped = ::write(g1.get(), "g", 1) == 1;
  }
  g1.Reset();
  auto err = sys::ReadAll(e0.get());
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!mapped) return Fail(Errc::kInternal, "could not map ids into a user namespace for " + argv[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return Fail(Errc::kInternal, argv[0] + " failed (status " + std::to_string(status) + "): " +
                                     (err ? *err : std::string()));
  return Ok();
}

Result<sys::UniqueFd> OpenTap(const GuestNet& g) {
  if (g.tap.empty() || g.tap.size() >= IFNAMSIZ) return Fail(Errc::kInvalidArgument, "bad tap name " + g.tap);
  auto ns = sys::Open(g.netns_path, O_RDONLY);
  if (!ns) return tl::unexpected(std::move(ns.error()).Wrap("the sandbox's network namespace"));
  // setns(2) changes the calling thread only: a short-lived thread joins the namespace and
  // opens the device there (the tap's name is looked up in the opener's namespace).
  Result<sys::UniqueFd> out = Fail(Errc::kInternal, "tap not opened");
  std::thread t([&] {
    if (::setns(ns->get(), CLONE_NEWNET) != 0) {  // this thread only; it ends right after
      out = ErrnoFail("join " + g.netns_path);
      return;
    }
    int fd = ::open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
      out = ErrnoFail("open /dev/net/tun");
      return;
    }
    ifreq ifr{};
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    std::memcpy(ifr.ifr_name, g.tap.c_str(), g.tap.size());
    if (::ioctl(fd, TUNSETIFF, &ifr) != 0) {
      out = ErrnoFail("attach to tap " + g.tap + " in " + g.netns_path);
      ::close(fd);
      return;
    }
    out = sys::UniqueFd(fd);
  });
  t.join();
  return out;
}

}  // namespace space::runtime::microvm
