// sys: thin RAII wrappers over the kernel objects SPACE holds — file descriptors,
// child processes, temporary directories, mounts — and a helper to run a program.
//
// Every wrapper owns exactly one object and releases it in its destructor unless
// Release()d. Constructors never fail; fallible construction is a static Create()/Open()
// returning Result. Objects are movable, not copyable, and not thread-safe individually.
// Everything is opened O_CLOEXEC.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "common/common.h"

namespace space::sys {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.Release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept;
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { Reset(); }

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int Release() { int f = fd_; fd_ = -1; return f; }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC added.
Result<UniqueFd> Open(const std::string& path, int flags, mode_t mode = 0644);

// Writes all of `data`, retrying on EINTR and short writes.
Status WriteAll(int fd, std::string_view data);
// Reads until EOF.
Result<std::string> ReadAll(int fd);
Result<std::string> ReadFile(const std::string& path);
// Writes a file atomically: temp file in the same dir, fsync, rename, fsync dir.
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode = 0644);

// A running child process. The destructor SIGKILLs and reaps it unless Release()d or Wait()ed.
class ChildProcess {
 public:
  ChildProcess() = default;
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ChildProcess(ChildProcess&& o) noexcept : pid_(o.Release()) {}
  ChildProcess& operator=(ChildProcess&& o) noexcept;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  pid_t Release() { pid_t p = pid_; pid_ = -1; return p; }
  // Blocks until the child exits; returns the raw wait status.
  Result<int> Wait();

 private:
  pid_t pid_ = -1;
};

struct SpawnOptions {
  std::vector<std::string> argv;           // argv[0] is looked up in PATH if it has no '/'
  std::optional<std::vector<std::string>> env;  // nullopt: inherit
  std::string cwd;                          // empty: inherit
  int mount_ns_fd = -1;                     // setns(CLONE_NEWNS) in the child before exec
  int net_ns_fd = -1;                       // setns(CLONE_NEWNET) in the child before exec
  bool new_session = false;                 // setsid() in the child
  bool die_with_parent = false;             // SIGKILL the child when the spawning thread exits
  // A new anonymous session keyring for the child and all it starts, e.g. an OCI runtime
  // told not to make one (--no-new-keyring): crun joins a keyring named after the
  // container, a lookup that walks every named keyring on the host (find_keyring_by_name),
  // ~1 ms per create beside 5,000 sandboxes. Best effort: without keyrings (or keyctl
  // refused around spaced) the child keeps the spawner's.
  bool new_session_keyring = false;
  int stdin_fd = -1, stdout_fd = -1, stderr_fd = -1;  // -1: /dev/null
  int pass_fd = -1;                         // >= 3: given to the child as its fd 3
  // Detached mount trees (CloneMount fds) attached at these paths in a mount namespace of
  // the child's own: after mount_ns_fd, the child unshares one (a copy of the namespace it
  // is in, made private) and moves each tree to its path. Only the child and what it
  // starts see them, and the namespace the copy came from keeps its size: a runtime binary
  // started so reads and copies a mount table that does not grow with the instances.
  std::vector<std::pair<int, std::string>> attach_mounts;
  // >= 0: the program is this fd (execveat AT_EMPTY_PATH; argv[0] only names it), e.g. a
  // SealedExecutable's. `exec_keep` holds whatever keeps the fd open while these options live.
  int exec_fd = -1;
  std::shared_ptr<const void> exec_keep;
};

// A sealed in-memory copy of an executable (memfd with write, grow, shrink and seal
// sealed), for starting it often: OCI runtimes re-exec themselves from such a copy unless
// they already run from one (the CVE-2019-5736 defence: a container must not be able to
// rewrite the host's binary through /proc/self/exe), which costs them a copy or a bind
// mount, a second exec and a second dynamic link on every call. Current() hands out the
// copy, made again when the file at `path` changes (an upgrade takes effect at once).
// Thread-safe.
class SealedExecutable {
 public:
  static Result<std::unique_ptr<SealedExecutable>> Create(const std::string& path);
  // The copy of what is at the path now; the file is stat'ed on each call.
  Result<std::shared_ptr<const UniqueFd>> Current();
  const std::string& path() const { return path_; }

 private:
  explicit SealedExecutable(std::string path) : path_(std::move(path)) {}
  Status Refresh();  // with mu_ held
  std::string path_;
  std::mutex mu_;
  std::shared_ptr<const UniqueFd> fd_;
  struct Key {
    dev_t dev = 0;
    ino_t ino = 0;
    off_t size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Key&) const = default;
  } key_;
  static Key KeyOf(const struct stat& st);
};

// A detached copy of the mount (tree) at `path`, or of `path` as a bind if it is no
// mount point: open_tree(OPEN_TREE_CLONE | AT_RECURSIVE), close-on-exec. For
// SpawnOptions::attach_mounts; it goes away with its last fd unless attached.
Result<UniqueFd> CloneMount(const std::string& path);

// fork+exec with the options above. Errors in the child before exec are reported back
// through a CLOEXEC pipe, so a bad argv[0] is an error here, not a silent exit 127.
// The child copies only the descriptors numbered below the highest one it is given, so
// what a daemon holds for a long time belongs above them (MoveFdHigh).
Result<ChildProcess> Spawn(const SpawnOptions& opts);

// Descriptors a daemon holds one of per sandbox live at or above this number
// (MoveFdHigh): a spawned child then copies the few below it, not thousands of sockets
// that it would only close again at exec.
inline constexpr int kHighFdBase = 1024;
// `fd` moved to the lowest free number >= kHighFdBase (close-on-exec), or `fd` itself
// where the limit on open files leaves no room there.
UniqueFd MoveFdHigh(UniqueFd fd);
// Raises the soft limit on open files to the hard one (a daemon holds a descriptor per
// sandbox; shells start with 1,024). Spawned children get the old soft limit back:
// programs that use select() expect descriptors below 1,024. Returns the new soft limit.
uint64_t RaiseOpenFileLimit();

struct RunResult {
  int exit_code = -1;   // -1 when killed by a signal
  int signal = 0;
  std::string out, err;
  bool ok() const { return exit_code == 0; }
};

// Runs a program to completion, capturing stdout and stderr (each capped at 1 MiB).
// A non-zero exit is not an error here; callers decide (see RunChecked).
Result<RunResult> Run(SpawnOptions opts, int64_t timeout_ms = 60000);
// Like Run, but a non-zero exit becomes an error "argv0 args: exit N: stderr".
Result<RunResult> RunChecked(SpawnOptions opts, int64_t timeout_ms = 60000);

// A directory removed recursively on destruction.
class TempDir {
 public:
  static Result<TempDir> Create(const std::string& parent = "/tmp", const std::string& prefix = "space-");
  TempDir() = default;
  TempDir(TempDir&& o) noexcept : path_(std::move(o.path_)) { o.path_.clear(); }
  TempDir& operator=(TempDir&& o) noexcept;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

// Filesystem helpers.
Status MkdirAll(const std::string& path, mode_t mode = 0755);
Status RemoveAll(const std::string& path);   // does not cross mount points; ok if missing
bool Exists(const std::string& path);
// Entries of a directory, "." and ".." aside; 0 if it cannot be read.
size_t CountDirEntries(const std::string& path);
bool IsMountPoint(const std::string& path);
// A field of /proc/self/mountinfo with its octal escapes (\040 for a space, ...) undone.
std::string UnescapeMountField(const std::string& s);
// Mount points at or below `prefix`, deepest first (from /proc/self/mountinfo).
std::vector<std::string> MountsUnder(const std::string& prefix);
Result<std::string> RealPath(const std::string& path);
// Absolute path of the running executable's directory (for finding sibling binaries).
std::string SelfExeDir();

}  // namespace space::sys
