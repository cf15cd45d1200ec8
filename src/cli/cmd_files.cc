// space cp: copies files and directory trees between the host and a sandbox.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <memory>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/progress.h"
#include "sys/sys.h"

namespace space::cli {

using client::Client;
namespace fs = std::filesystem;

namespace {

// The last component of a path ("a/b/" -> "b"); empty for "/".
std::string BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  if (base == "/") return "";
  return std::string(base);
}

// "/a//b/./c/" -> "/a/b/c": how paths are compared with those in listings.
std::string NormalizeRemote(std::string_view path) {
  std::string out = fs::path(path).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

std::string JoinRemote(std::string_view dir, std::string_view name) {
  std::string out(dir);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

// A name from a sandbox listing is untrusted: it must be one plain path component.
bool SafeName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

int ModeOf(const Json& entry, int fallback) {
  auto m = JsonInt(entry, "mode");
  if (!m) return fallback;
  // Permission bits only: a sandbox cannot hand out setuid files on the host.
  return static_cast<int>(*m & 0777);
}

// ---- host -> sandbox ----

// Uploads one host file, with a progress line (stderr, terminals only) while it goes: how
// far the upload has read the file is its descriptor's offset.
Result<Json> UploadFile(Client& c, const std::string& id, const std::string& remote,
                        const std::string& host, int mode) {
  auto fd = sys::Open(host, O_RDONLY);
  if (!fd) return tl::unexpected(fd.error());
  struct stat st;
  if (::fstat(fd->get(), &st) != 0) return ErrnoFail("stat " + host);
  if (S_ISDIR(st.st_mode)) return Fail(Errc::kInvalidArgument, host + " is a directory");
  const int64_t size = S_ISREG(st.st_mode) ? static_cast<int64_t>(st.st_size) : -1;
  const auto t0 = std::chrono::steady_clock::now();
  const int raw = fd->get();
  ProgressTicker progress([&, raw] {
    off_t at = ::lseek(raw, 0, SEEK_CUR);
    if (at < 0) return std::string();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return "cp " + BaseName(host) + ": " +
           TransferLine(static_cast<uint64_t>(at), size > 0 ? static_cast<uint64_t>(size) : 0, secs);
  });
  return c.WriteFileFromFd(id, remote, raw, size, mode);
}

// Downloads one file, with a progress line (stderr, terminals only): the host file's size
// against the sandbox's.
Result<uint64_t> DownloadFile(Client& c, const std::string& id, const std::string& remote,
                              const std::string& host, int mode, uint64_t size) {
  const auto t0 = std::chrono::steady_clock::now();
  ProgressTicker progress([&] {
    struct stat st;
    if (::stat(host.c_str(), &st) != 0) return std::string();
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return "cp " + BaseName(remote) + ": " + TransferLine(static_cast<uint64_t>(st.st_size), size, secs);
  });
  return c.ReadFileTo(id, remote, host, mode);
}

Status UploadTree(Client& c, const std::string& id, const fs::path& src, const std::string& dst) {
  auto made = c.Mkdir(id, dst);
  if (!made && made.error().code != Errc::kConflict) {
    return tl::unexpected(std::move(made).error().Wrap("mkdir " + id + ":" + dst));
  }
  std::error_code ec;
  std::vector<fs::directory_entry> entries;
  for (fs::directory_iterator it(src, ec), end; !ec && it != end; it.increment(ec)) {
    entries.push_back(*it);
  }
  if (ec) return Fail(ErrcFromErrno(ec.value()), "read " + src.string() + ": " + ec.message());
  std::sort(entries.begin(), entries.end(),
            [](const auto& x, const auto& y) { return x.path() < y.path(); });
  for (const fs::directory_entry& e : entries) {
    std::string name = e.path().filename().string();
    std::string remote = JoinRemote(dst, name);
    struct stat st;
    if (::lstat(e.path().c_str(), &st) != 0) return ErrnoFail("stat " + e.path().string());
    if (S_ISDIR(st.st_mode)) {
      SPACE_TRY(UploadTree(c, id, e.path(), remote));
    } else if (S_ISREG(st.st_mode)) {
      auto w = UploadFile(c, id, remote, e.path().string(), static_cast<int>(st.st_mode & 0777));
      if (!w) return tl::unexpected(std::move(w).error().Wrap("copy " + e.path().string()));
    } else {
      // The API has no way to create symlinks or special files in a sandbox.
      std::fprintf(stderr, "space: skipping %s (%s)\n", e.path().c_str(),
                   S_ISLNK(st.st_mode) ? "symlink" : "not a regular file");
    }
  }
  return Ok();
}

int Upload(Client& c, const std::string& src, const RemotePath& dst) {
  struct stat st;
  if (::stat(src.c_str(), &st) != 0) return ReportError(ErrnoFail("cp: " + src).value());
  std::string target = dst.path;
  std::string base = BaseName(src);
  bool into_dir = target.back() == '/';
  if (!into_dir) {
    auto remote = c.Stat(dst.sandbox, target);
    if (remote) {
      into_dir = JsonStringOr(*remote, "type", "") == "dir";
    } else if (remote.error().code != Errc::kNotFound) {
      return ReportError(std::move(remote).error().Wrap("cp: " + dst.sandbox + ":" + target));
    }
  }
  if (into_dir && !base.empty() && base != "." && base != "..") target = JoinRemote(target, base);
  if (S_ISDIR(st.st_mode)) {
    auto r = UploadTree(c, dst.sandbox, src, target);
    if (!r) return ReportError(std::move(r).error().Wrap("cp"));
    return 0;
  }
  auto r = UploadFile(c, dst.sandbox, target, src, static_cast<int>(st.st_mode & 0777));
  if (!r) return ReportError(std::move(r).error().Wrap("cp " + src));
  return 0;
}

// ---- sandbox -> host ----

// Makes room for a new entry at `path`: removes a file or symlink left there (never follows
// it), keeps a directory.
Status ClearForFile(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Ok();
  if (S_ISDIR(st.st_mode)) return Fail(Errc::kConflict, path + " is a directory");
  if (::unlink(path.c_str()) != 0) return ErrnoFail("unlink " + path);
  return Ok();
}

Status DownloadEntry(Client& c, const std::string& id, const Json& entry, const std::string& remote,
                     const std::string& host, bool top);

Status DownloadTree(Client& c, const std::string& id, const std::string& remote,
                    const std::string& host) {
  struct stat st;
  if (::lstat(host.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return Fail(Errc::kConflict, host + " exists and is not a directory");
  } else if (::mkdir(host.c_str(), 0755) != 0) {
    return ErrnoFail("mkdir " + host);
  }
  auto list = c.ListFiles(id, remote, 1);
  if (!list) return tl::unexpected(std::move(list).error().Wrap("list " + id + ":" + remote));
  for (const Json& entry : *list) {
    std::string name = JsonStringOr(entry, "name", BaseName(JsonStringOr(entry, "path", "")));
    std::string child = JoinRemote(remote, name);
    // Skip the directory itself and anything deeper than one level, whatever `depth` meant.
    if (auto p = JsonString(entry, "path");
        p && NormalizeRemote(fs::path(NormalizeRemote(*p)).parent_path().string()) != remote) {
      continue;
    }
    if (!SafeName(name)) {
      std::fprintf(stderr, "space: skipping entry with unsafe name \"%s\"\n", name.c_str());
      continue;
    }
    SPACE_TRY(DownloadEntry(c, id, entry, child, host + "/" + name, false));
  }
  return Ok();
}

Status DownloadEntry(Client& c, const std::string& id, const Json& entry, const std::string& remote,
                     const std::string& host, bool top) {
  std::string type = JsonStringOr(entry, "type", "");
  if (type == "dir") return DownloadTree(c, id, remote, host);
  if (type == "file") {
    // Inside a tree, never write through a symlink that is already there.
    if (!top) SPACE_TRY(ClearForFile(host));
    auto r = DownloadFile(c, id, remote, host, ModeOf(entry, 0644),
                          static_cast<uint64_t>(std::max<int64_t>(0, JsonIntOr(entry, "size", 0))));
    if (!r) return tl::unexpected(std::move(r).error().Wrap("copy " + id + ":" + remote));
    // open(2) applied the umask, and an existing file keeps its mode: set it.
    ::chmod(host.c_str(), static_cast<mode_t>(ModeOf(entry, 0644)));
    return Ok();
  }
  if (type == "symlink") {
    std::string target = JsonStringOr(entry, "link_target", "");
    if (target.empty()) return Fail(Errc::kInternal, remote + ": symlink without a target");
    SPACE_TRY(ClearForFile(host));
    if (::symlink(target.c_str(), host.c_str()) != 0) return ErrnoFail("symlink " + host);
    return Ok();
  }
  std::fprintf(stderr, "space: skipping %s:%s (%s)\n", id.c_str(), remote.c_str(),
               type.empty() ? "unknown type" : type.c_str());
  return Ok();
}

int Download(Client& c, const RemotePath& src, const std::string& dst) {
  auto entry = c.Stat(src.sandbox, src.path);
  if (!entry)
    return ReportError(std::move(entry).error().Wrap("cp: " + src.sandbox + ":" + src.path));
  std::string target = dst;
  std::string base = BaseName(src.path);
  struct stat st;
  bool into_dir =
      (!dst.empty() && dst.back() == '/') || (::stat(dst.c_str(), &st) == 0 && S_ISDIR(st.st_mode));
  if (into_dir && !base.empty()) target = (fs::path(dst) / base).string();
  auto r = DownloadEntry(c, src.sandbox, *entry, NormalizeRemote(src.path), target, true);
  if (!r) return ReportError(std::move(r).error().Wrap("cp"));
  return 0;
}

int RunCp(Context& ctx, const std::string& src, const std::string& dst) {
  auto remote_src = ParseRemotePath(src);
  auto remote_dst = ParseRemotePath(dst);
  if (remote_src && remote_dst) {
    return ReportUsage(
        "cp: copying between sandboxes is not supported; one side must be a "
        "host path");
  }
  if (!remote_src && !remote_dst) {
    return ReportUsage("cp: one of SRC and DST must be a sandbox path, ID:/absolute/path");
  }
  auto c = ctx.GetClient();
  if (!c) return ReportError(c.error());
  if (remote_dst) return Upload(**c, src, *remote_dst);
  return Download(**c, *remote_src, dst);
}

}  // namespace

void AddFileCommands(CLI::App& app, Context& ctx) {
  auto src = std::make_shared<std::string>();
  auto dst = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "cp", "Copy files or directories between the host and a sandbox (one side ID:/path)");
  cmd->add_option("src", *src, "Source: host path or ID:/path")->required();
  cmd->add_option("dst", *dst, "Destination: host path or ID:/path")->required();
  cmd->footer("Examples: space cp ./app sb-abc:/work   space cp sb-abc:/work/out.txt .");
  cmd->callback([&ctx, src, dst] { ctx.exit_code = RunCp(ctx, *src, *dst); });
}

}  // namespace space::cli
