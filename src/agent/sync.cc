// agent: `sync`, the host's word to a guest restored from a snapshot (see sync.h).
#include "agent/sync.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/random.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "sys/sys.h"

namespace space::agent {
namespace {


std::string FromHex(const std::string& hex) {
  std::string out;
  if (hex.size() % 2) return out;
  for (size_t i = 0; i < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

// Replaces `path` atomically (a temporary file renamed over it) without fsync: a guest
// fsync is a flush of the virtual disk, i.e. a host fdatasync, which cost ~100 ms of a
// restore. The file stays in the guest's page cache, which every snapshot, suspend and
// fork saves with the disk; a guest that crashes before writeback is a lost sandbox anyway.
bool ReplaceFileNoSync(const std::string& path, std::string_view data, mode_t mode) {
  std::string tmp = path + ".tmp.sync";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return false;
  bool ok = sys::WriteAll(fd, data).has_value() && ::fchmod(fd, mode) == 0;
  ::close(fd);
  ok = ok && ::rename(tmp.c_str(), path.c_str()) == 0;
  if (!ok) ::unlink(tmp.c_str());
  return ok;
}

// /etc/machine-id is overwritten in place when it has the new id's length (every sync
// after the first): replacing a file by rename makes ext4 start writing it back at once
// (auto_da_alloc), which under TCG cost 15-30 ms of every restore.
bool WriteMachineId(const std::string& id) {
  const std::string data = id + "\n";
  const char* path = "/etc/machine-id";
  int fd = ::open(path, O_WRONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) {
    struct stat st;
    bool same_size = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
                     static_cast<size_t>(st.st_size) == data.size();
    bool ok = same_size && ::pwrite(fd, data.data(), data.size(), 0) == static_cast<ssize_t>(data.size());
    ::close(fd);
    if (ok) return true;
  }
  return ReplaceFileNoSync(path, data, 0444);
}


// The address of a network interface. Classic ioctls (no netlink): enough for one IPv4
// address and a default route, and in every kernel.
bool ParseIpv4(const std::string& s, in_addr* a) { return ::inet_pton(AF_INET, s.c_str(), a) == 1; }

sockaddr Sockaddr(in_addr a) {
  sockaddr sa{};
  auto* in = reinterpret_cast<sockaddr_in*>(&sa);
  in->sin_family = AF_INET;
  in->sin_addr = a;
  return sa;
}

std::string Errno(const std::string& what) { return what + ": " + std::strerror(errno); }

std::string InterfaceUp(const std::string& name) {
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), std::min(name.size(), sizeof ifr.ifr_name - 1));
  std::string err;
  if (::ioctl(s, SIOCGIFFLAGS, &ifr) != 0) {
    err = Errno("interface " + name);
  } else if (!(ifr.ifr_flags & IFF_UP)) {
    ifr.ifr_flags |= IFF_UP;
    if (::ioctl(s, SIOCSIFFLAGS, &ifr) != 0) err = Errno("bring " + name + " up");
  }
  ::close(s);
  return err;
}

// {"interface","address","prefix_len","gateway"}: the interface gets the address (replacing
// any earlier one: a fork or restore of another sandbox's VM) and the default route goes via
// the gateway. "" on success, else why not.
std::string ConfigureNet(const Json& n) {
  std::string name = JsonStringOr(n, "interface", "eth0");
  int64_t prefix = JsonIntOr(n, "prefix_len", -1);
  in_addr addr{}, gw{};
  if (name.empty() || name.size() >= IFNAMSIZ) return "bad interface name";
  if (!ParseIpv4(JsonStringOr(n, "address", ""), &addr)) return "bad address";
  if (!ParseIpv4(JsonStringOr(n, "gateway", ""), &gw)) return "bad gateway";
  if (prefix < 1 || prefix > 32) return "bad prefix length";
  in_addr mask{};
  mask.s_addr = htonl(prefix == 32 ? 0xffffffffu : ~((1u << (32 - prefix)) - 1));
  int s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  std::string err;
  ifreq ifr{};
  std::memcpy(ifr.ifr_name, name.c_str(), name.size());
  ifr.ifr_addr = Sockaddr(addr);
  if (::ioctl(s, SIOCSIFADDR, &ifr) != 0) err = Errno("set address of " + name);
  ifr.ifr_netmask = Sockaddr(mask);
  if (err.empty() && ::ioctl(s, SIOCSIFNETMASK, &ifr) != 0) err = Errno("set netmask of " + name);
  ::close(s);
  if (err.empty()) err = InterfaceUp(name);
  if (!err.empty()) return err;
  s = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return Errno("socket");
  rtentry rt{};
  in_addr any{};
  rt.rt_dst = Sockaddr(any);
  rt.rt_genmask = Sockaddr(any);
  rt.rt_gateway = Sockaddr(gw);
  rt.rt_flags = RTF_UP | RTF_GATEWAY;
  rt.rt_dev = name.data();
  // An earlier default route (another gateway) goes first.
  for (int i = 0; i < 8; ++i) {
    rtentry del{};
    del.rt_dst = Sockaddr(any);
    del.rt_genmask = Sockaddr(any);
    if (::ioctl(s, SIOCDELRT, &del) != 0) break;
  }
  if (::ioctl(s, SIOCADDRT, &rt) != 0 && errno != EEXIST) err = Errno("add default route via gateway");
  ::close(s);
  return err;
}

// {"/abs/path": "content", ...}: each file replaced (parents made, mode 0644). Bounded.
std::string WriteFiles(const Json& files) {
  if (files.size() > 16) return "too many files";
  for (const auto& [path, content] : files.items()) {
    if (!content.is_string()) return "content of " + path + " is not a string";
    if (path.empty() || path[0] != '/' || path.find("/../") != std::string::npos ||
        path.size() > 4096 || path.find('\0') != std::string::npos)
      return "bad path " + path;
    for (size_t p = path.find('/', 1); p != std::string::npos; p = path.find('/', p + 1)) {
      std::string dir = path.substr(0, p);
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + dir);
    }
    if (!ReplaceFileNoSync(path, content.get_ref<const std::string&>(), 0644)) return Errno("write " + path);
  }
  return "";
}

// Named volumes of a microVM (docs/volumes.md): the host serves them through one
// virtiofs device, tag "space-volumes", whose root holds one directory per volume ("0",
// "1", ...: the order of `volumes`). It is mounted at /.space/volumes and each directory
// bound at its path, nosuid and nodev like the oci runtime's binds, read-only where asked
// (EROFS in this kernel; the host's side of a read-only volume is read-only as well, so a
// remount by the guest's root gains nothing). Idempotent: a path already bound to its
// directory is left as it is. "" on success, else why not.
std::string MountVolumes(const Json& vols) {
  if (!vols.is_array() || vols.size() > 16) return "volumes must be an array of at most 16";
  const std::string root = "/.space/volumes";
  struct stat space_st, root_st;
  if (::mkdir(root.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + root);
  if (::stat("/.space", &space_st) != 0 || ::stat(root.c_str(), &root_st) != 0) return Errno("stat " + root);
  if (root_st.st_dev == space_st.st_dev &&
      ::mount("space-volumes", root.c_str(), "virtiofs", MS_NOSUID | MS_NODEV, nullptr) != 0)
    return Errno("mount the volumes' virtiofs device");
  for (size_t k = 0; k < vols.size(); ++k) {
    const std::string path = JsonStringOr(vols[k], "path", "");
    const bool ro = JsonBoolOr(vols[k], "read_only", false);
    if (path.size() < 2 || path[0] != '/' || path.back() == '/' || path.size() > 4096 ||
        path.find("/../") != std::string::npos || path.find("//") != std::string::npos ||
        path.find('\0') != std::string::npos || (path.size() >= 3 && path.compare(path.size() - 3, 3, "/..") == 0))
      return "bad volume path " + path;
    const std::string source = root + "/" + std::to_string(k);
    for (size_t p = path.find('/', 1);; p = path.find('/', p + 1)) {
      std::string dir = path.substr(0, p);
      if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return Errno("mkdir " + dir);
      if (p == std::string::npos) break;
    }
    struct stat src_st, dst_st;
    if (::stat(source.c_str(), &src_st) != 0) return Errno("volume directory " + source);
    if (::stat(path.c_str(), &dst_st) == 0 && dst_st.st_dev == src_st.st_dev && dst_st.st_ino == src_st.st_ino)
      continue;
    if (::mount(source.c_str(), path.c_str(), nullptr, MS_BIND, nullptr) != 0) return Errno("bind " + path);
    unsigned long flags = MS_BIND | MS_REMOUNT | MS_NOSUID | MS_NODEV | (ro ? MS_RDONLY : 0);
    if (::mount(nullptr, path.c_str(), nullptr, flags, nullptr) != 0) return Errno("remount " + path);
  }
  return "";
}

}  // namespace

Json SyncIdentity(const Json& j) {
  Json out = {{"ok", true}};
  if (auto t = JsonInt(j, "time_ns"); t && *t > 0) {
    struct timespec ts = {static_cast<time_t>(*t / 1'000'000'000), static_cast<long>(*t % 1'000'000'000)};
    out["clock_set"] = ::clock_settime(CLOCK_REALTIME, &ts) == 0;
  }
  if (auto h = JsonString(j, "hostname"); h && !h->empty() && h->size() < 64) {
    out["hostname_set"] = ::sethostname(h->data(), h->size()) == 0;
  }
  if (auto id = JsonString(j, "machine_id");
      id && id->size() == 32 && id->find_first_not_of("0123456789abcdef") == std::string::npos) {
    out["machine_id_set"] = WriteMachineId(*id);
  }
  if (auto e = JsonString(j, "entropy"); e && !e->empty() && e->size() <= 1024) {
    std::string bytes =
        e->find_first_not_of("0123456789abcdef") == std::string::npos ? FromHex(*e) : "";
    bool added = false;
    int fd = ::open("/dev/random", O_WRONLY | O_CLOEXEC);
    if (fd >= 0 && !bytes.empty()) {
      std::string buf(sizeof(struct rand_pool_info) + bytes.size(), '\0');
      auto* info = reinterpret_cast<struct rand_pool_info*>(buf.data());
      info->entropy_count = static_cast<int>(bytes.size() * 8);
      info->buf_size = static_cast<int>(bytes.size());
      std::memcpy(info->buf, bytes.data(), bytes.size());
      added = ::ioctl(fd, RNDADDENTROPY, info) == 0;
      if (added) (void)::ioctl(fd, RNDRESEEDCRNG);
    }
    if (fd >= 0) ::close(fd);
    out["entropy_added"] = added;
  }
  // Loopback always; eth0 when the host gives the guest an address.
  (void)InterfaceUp("lo");
  if (const Json* n = JsonField(j, "net"); n && n->is_object()) {
    std::string err = ConfigureNet(*n);
    out["net_set"] = err.empty();
    if (!err.empty()) out["net_error"] = err;
  }
  if (const Json* f = JsonField(j, "files"); f && f->is_object()) {
    std::string err = WriteFiles(*f);
    out["files_written"] = err.empty();
    if (!err.empty()) out["files_error"] = err;
  }
  if (const Json* v = JsonField(j, "volumes")) {
    std::string err = MountVolumes(*v);
    out["volumes_mounted"] = err.empty();
    if (!err.empty()) out["volumes_error"] = err;
  }
  return out;
}


}  // namespace space::agent
