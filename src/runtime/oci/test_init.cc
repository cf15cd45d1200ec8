// oci_test_init: a tiny static stand-in for space-agent, used as PID 1 by the OCI tests.
//
// Listens on the unix socket given by `--listen PATH`. Each connection sends one line:
//   "facts"      -> "pid=P uid=U gid=G hostname=H ifaces=lo,eth0\n"
//   "sh CMD"     -> the combined stdout+stderr of `/bin/sh -c CMD`, then "exit=N\n"
// and the connection is closed. Like a real init it reaps every orphan, so background
// processes of the tests do not pile up as zombies.
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace {

void Reap() {
  while (::waitpid(-1, nullptr, WNOHANG) > 0) {
  }
}

void WriteAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = ::write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

std::string Interfaces() {
  std::ifstream in("/proc/net/dev");
  std::string line, out;
  int n = 0;
  while (std::getline(in, line)) {
    if (++n <= 2) continue;  // two header lines
    size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    out += (out.empty() ? "" : ",") + name;
  }
  return out;
}

std::string Facts() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::ostringstream ss;
  ss << "pid=" << ::getpid() << " uid=" << ::getuid() << " gid=" << ::getgid()
     << " hostname=" << host << " ifaces=" << Interfaces() << "\n";
  return ss.str();
}

std::string Shell(const std::string& cmd) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return "pipe failed\nexit=-1\n";
  pid_t pid = ::fork();
  if (pid < 0) {
    ::close(p[0]);
    ::close(p[1]);
    return "fork failed\nexit=-1\n";
  }
  if (pid == 0) {
    ::dup2(p[1], 1);
    ::dup2(p[1], 2);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(p[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(p[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(p[0]);
  int st = 0;
  ::waitpid(pid, &st, 0);
  int code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out + "exit=" + std::to_string(code) + "\n";
}

void Serve(int conn) {
  std::string line;
  char c;
  while (line.size() < 65536 && ::read(conn, &c, 1) == 1 && c != '\n') line += c;
  if (line == "facts") {
    WriteAll(conn, Facts());
  } else if (line.rfind("sh ", 0) == 0) {
    WriteAll(conn, Shell(line.substr(3)));
  } else {
    WriteAll(conn, "unknown request\n");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = nullptr;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--listen") == 0) path = argv[i + 1];
  }
  if (!path || std::strlen(path) >= sizeof(sockaddr_un::sun_path)) {
    std::fprintf(stderr, "usage: %s --listen PATH\n", argv[0]);
    return 2;
  }
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strcpy(addr.sun_path, path);
  ::unlink(path);
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(fd, 16) != 0) {
    std::perror("oci_test_init: listen");
    return 1;
  }
  std::fprintf(stderr, "oci_test_init: listening on %s\n", path);
  for (;;) {
    Reap();
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    int conn = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) continue;
    Serve(conn);
    ::close(conn);
  }
}
