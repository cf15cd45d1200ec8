// A small-file workload for bench/volumes.sh: N files of SIZE bytes in a new directory
// DIR, each created and written, then stat'ed, read and unlinked, one pass per phase.
// Static, so the same binary runs on the host, in oci sandboxes and in microVMs.
// Prints one line: "smallfiles n=N size=S create_ms=… stat_ms=… read_ms=… unlink_ms=… total_ms=…".
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace {

double NowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

int Fail(const std::string& what) {
  std::perror(what.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s DIR N SIZE\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  const int n = std::atoi(argv[2]);
  const int size = std::atoi(argv[3]);
  if (n <= 0 || size < 0) return 2;
  std::vector<char> buf(static_cast<size_t>(size) + 1, 'x');
  std::vector<std::string> paths;
  for (int i = 0; i < n; ++i) paths.push_back(dir + "/f" + std::to_string(i));
  if (::mkdir(dir.c_str(), 0755) != 0) return Fail("mkdir " + dir);
  double t[5];
  t[0] = NowMs();
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) return Fail(p);
    if (::write(fd, buf.data(), size) != size) return Fail("write " + p);
    ::close(fd);
  }
  t[1] = NowMs();
  struct stat st;
  for (const auto& p : paths)
    if (::stat(p.c_str(), &st) != 0 || st.st_size != size) return Fail("stat " + p);
  t[2] = NowMs();
  for (const auto& p : paths) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Fail(p);
    if (::read(fd, buf.data(), buf.size()) != size) return Fail("read " + p);
    ::close(fd);
  }
  t[3] = NowMs();
  for (const auto& p : paths)
    if (::unlink(p.c_str()) != 0) return Fail("unlink " + p);
  if (::rmdir(dir.c_str()) != 0) return Fail("rmdir " + dir);
  t[4] = NowMs();
  std::printf("smallfiles n=%d size=%d create_ms=%.1f stat_ms=%.1f read_ms=%.1f unlink_ms=%.1f total_ms=%.1f\n",
              n, size, t[1] - t[0], t[2] - t[1], t[3] - t[2], t[4] - t[3], t[4] - t[0]);
  return 0;
}
