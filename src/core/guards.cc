// Resource guards: the output quota, the host's disk reserve, memory admission, output
// retention (docs/api.md, "Resource guards").
//
// Output is held, never dropped: StoreOutput stores what fits and returns the durable size,
// so the agent gets no credit for the rest. It keeps those bytes (its window) and stops
// reading the command's pipes once the window is full; the command blocks in write().
// When there is room again (a raised quota, deleted output, free disk) GuardTick asks the
// agent for a fresh HELLO, and it retransmits everything unacknowledged from the log's end.
#include <dirent.h>
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "core/internal.h"

namespace space::core {

namespace {

constexpr const char* kQuotaReached = "output_quota_reached";
constexpr const char* kDiskFull = "host_disk_full";
// Other writers (the sandboxes' own files) take space too: look at least this often.
constexpr int64_t kDiskRecheckBytes = 8 << 20;
constexpr int64_t kDiskResumeSlack = 2 << 20;

int64_t OutputQuotaOf(const store::SandboxRecord& rec, const Config& config) {
  const Json* l = JsonField(rec.spec, "limits");
  return l ? JsonIntOr(*l, "output_bytes", config.max_output_bytes) : config.max_output_bytes;
}

// Bytes in the regular files of a sandbox's log dir (its commands' output).
int64_t CountOutputBytes(const std::string& dir) {
  int64_t total = 0;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    struct stat st;
    if (::fstatat(::dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
      total += st.st_size;
  }
  ::closedir(d);
  return total;
}

int64_t TotalRam() {
  struct sysinfo si;
  if (::sysinfo(&si) != 0) return 0;
  return static_cast<int64_t>(si.totalram) * si.mem_unit;
}

// The memory a stored sandbox commits: its limit (an unlimited one may use all of the
// host's), none while it is suspended, failed or being deleted.
int64_t CommitOf(const store::SandboxRecord& r, int64_t ram) {
  if (r.state == "error" || r.state == "suspended" || r.state == "deleting") return 0;
  const Json* l = JsonField(r.spec, "limits");
  const int64_t m = l ? JsonIntOr(*l, "memory_bytes", 0) : 0;
  return m > 0 ? m : ram;
}

std::string Bytes(int64_t n) {
  if (n >= (10ll << 30)) return std::to_string(n >> 30) + " GiB";
  if (n >= (10ll << 20)) return std::to_string(n >> 20) + " MiB";
  return std::to_string(n) + " bytes";
}

}  // namespace

void Platform::Impl::InitGuards(Sandbox& sb) {
  sb.output_quota = OutputQuotaOf(sb.rec, config);
  sb.output_stored = CountOutputBytes(LogDir(sb.rec.id));
  // Before the agent retransmits: on a full disk (say, after a restart) nothing is
  // written at all rather than a part of each chunk into whatever space a delete freed.
  RefreshDisk();
  if (auto* rt = RuntimeFor(sb.rec)) {
    auto n = rt->OomKills(sb.rec.id);
    sb.oom_kills = n ? *n : -1;
  }
}

bool Platform::Impl::OomKilled(Sandbox& sb) {
  auto* rt = RuntimeFor(sb.rec);
  if (!rt) return false;
  auto n = rt->OomKills(sb.rec.id);
  if (!n) return false;
  const int64_t seen = sb.oom_kills.exchange(*n);
  return seen >= 0 && *n > seen;
}

Result<uint64_t> Platform::Impl::StoreOutput(Sandbox& sb, Command& cmd, store::OutputStream s,
                                             uint64_t offset, store::OutputBytes& bytes) {
  if (cmd.discard) return offset + bytes.size();
  const uint64_t size = cmd.log->Size(s);
  if (offset > size) {
    // Frames were refused before this one: it waits for the retransmission too.
    if (cmd.refused) return size;
    return cmd.log->Append(s, offset, bytes);  // the log's own error (a gap)
  }
  const uint64_t end = offset + bytes.size();
  if (end <= size) return size;  // all stored already (a retransmission)
  uint64_t fresh = end - size;
  uint64_t allow = fresh;
  const char* why = nullptr;
  if (!disk_low && (disk_budget.load() < static_cast<int64_t>(fresh) ||
                    disk_since_look.load() >= kDiskRecheckBytes))
    RefreshDisk();
  if (disk_low) {
    allow = 0;
    why = kDiskFull;
  } else if (const int64_t budget = disk_budget.load(); budget < static_cast<int64_t>(fresh)) {
    // This chunk would cross the reserve: what fits is stored, the rest held.
    allow = static_cast<uint64_t>(std::max<int64_t>(0, budget));
    why = kDiskFull;
    disk_low = true;
  }
  int64_t cap = sb.output_quota;
  if (cmd.drain) {
    cap = 0;  // exited and its pipes done: what is left is bounded
  } else if (cmd.drain_until > 0 && cap > 0) {
    cap = std::max(cap, cmd.drain_until);
  }
  if (cap > 0 && allow > 0) {
    const int64_t room = std::max<int64_t>(0, cap - sb.output_stored.load());
    if (static_cast<uint64_t>(room) < allow) {
      allow = static_cast<uint64_t>(room);
      why = kQuotaReached;
    }
  }
  uint64_t stored = size;
  if (allow > 0) {
    auto r = cmd.log->Append(s, offset, bytes, size + allow);
    // A failed write may have stored a part; the log knows how much.
    const uint64_t now = cmd.log->Size(s);
    sb.output_stored += static_cast<int64_t>(now - size);
    disk_budget -= static_cast<int64_t>(now - size);
    disk_since_look += static_cast<int64_t>(now - size);
    (s == store::OutputStream::kStdout ? counters.stdout_bytes : counters.stderr_bytes) += now - size;
    stored = now;
    if (!r) {
      const int err = r.error().sys_errno;
      if (err != ENOSPC && err != EDQUOT) return r;
      disk_low = true;  // until GuardTick sees room again
      why = kDiskFull;
    }
  }
  if (why) {
    if (cmd.held != why) {
      spdlog::warn("sandbox {}: output of {} held: {}", sb.rec.id, cmd.rec.id, why);
      cmd.held = why;
      cmd.rec.reason = why;
    }
    cmd.refused = true;
    sb.output_held = true;
  } else if (cmd.refused) {
    // The retransmission has begun: the log and the agent agree again.
    cmd.refused = false;
  }
  return stored;
}

Status Platform::Impl::ExitComplete(Command& cmd, const Json& exit) {
  if (cmd.discard) {
    cmd.rec.reason = "output_deleted";
    cmd.held.clear();
    return Ok();
  }
  const uint64_t out_end = static_cast<uint64_t>(JsonIntOr(exit, "stdout_end", 0));
  const uint64_t err_end = static_cast<uint64_t>(JsonIntOr(exit, "stderr_end", 0));
  if (cmd.log->Size(store::OutputStream::kStdout) < out_end ||
      cmd.log->Size(store::OutputStream::kStderr) < err_end) {
    if (!cmd.held.empty() || cmd.refused) {
      cmd.exit_pending = true;  // GuardTick lets the rest in (quota) or waits (disk)
      return Fail(Errc::kResourceExhausted, "output of " + cmd.rec.id + " is held");
    }
  }
  if (!cmd.held.empty() && cmd.rec.reason == cmd.held) cmd.rec.reason.clear();
  cmd.held.clear();
  return Ok();
}

Status Platform::Impl::DeferExit(Sandbox& sb, Command& cmd, const Error& why) {
  if (why.code != Errc::kResourceExhausted) return tl::unexpected(why);
  std::lock_guard l(cmd.mu);
  if (!cmd.exit_pending)
    spdlog::warn("sandbox {}: the exit of {} waits for disk space: {}", sb.rec.id, cmd.rec.id,
                 why.message);
  cmd.rec.state = "running";
  cmd.rec.exit_code.reset();
  cmd.rec.signal.reset();
  cmd.rec.timed_out = false;
  cmd.rec.ended_ms = 0;
  cmd.exit_pending = true;
  cmd.drain = false;
  disk_low = true;
  sb.output_held = true;
  return Fail(Errc::kResourceExhausted, why.message);
}

void Platform::Impl::NoteHello(Sandbox& sb, const Json& hello) {
  const Json* cmds = JsonField(hello, "commands");
  if (!cmds || !cmds->is_array()) return;
  for (const auto& c : *cmds) {
    if (JsonBoolOr(c, "running", true)) continue;
    auto stream = JsonInt(c, "stream");
    if (!stream) continue;
    std::shared_ptr<Command> cmd;
    {
      std::lock_guard l(sb.cmd_mu);
      auto it = sb.by_stream.find(static_cast<uint32_t>(*stream));
      if (it != sb.by_stream.end()) cmd = it->second;
    }
    if (!cmd) continue;
    std::lock_guard l(cmd->mu);
    cmd->process_ended = true;
    if (cmd->held != kQuotaReached || cmd->drain_until > 0) continue;
    // At most one window per stream plus what a pipe holds is left in the agent.
    cmd->drain_until = sb.output_stored.load() + 2 * (8ll << 20) + (2ll << 20);
    spdlog::info("sandbox {}: {} has ended; storing its last output past the quota", sb.rec.id,
                 cmd->rec.id);
  }
}

bool Platform::Impl::RefreshDisk() {
  struct statvfs vfs;
  if (::statvfs(config.data_dir.c_str(), &vfs) != 0) return disk_low;
  const int64_t free_bytes = static_cast<int64_t>(vfs.f_bavail) * static_cast<int64_t>(vfs.f_frsize);
  const int64_t total = static_cast<int64_t>(vfs.f_blocks) * static_cast<int64_t>(vfs.f_frsize);
  const int64_t reserve =
      config.min_free_bytes >= 0 ? config.min_free_bytes : std::max<int64_t>(2ll << 30, total / 20);
  // Below 1 MiB the database could not commit anything: low whatever the reserve.
  const int64_t floor = std::max<int64_t>(reserve, 1 << 20);
  // Output stops right at the reserve (StoreOutput's budget): once low, it stays low until
  // a little more than that is free again, so held output does not resume and stop again
  // at every look.
  const bool low = free_bytes < floor || (disk_low.load() && free_bytes < floor + kDiskResumeSlack);
  if (low != disk_low.load()) {
    if (low) {
      spdlog::warn("data dir {}: {} free, below the reserve of {}: creates refused, output held",
                   config.data_dir, Bytes(free_bytes), Bytes(reserve));
    } else {
      spdlog::info("data dir {}: {} free again (reserve {}): resuming", config.data_dir,
                   Bytes(free_bytes), Bytes(reserve));
    }
  }
  disk_free = free_bytes;
  disk_reserve = reserve;
  disk_budget = free_bytes - floor;
  disk_since_look = 0;
  disk_low = low;
  return low;
}

Status Platform::Impl::AdmitDisk(const std::string& what) {
  if (!RefreshDisk()) return Ok();
  return Fail(Errc::kInsufficientStorage,
              what + " refused: the data dir's filesystem (" + config.data_dir + ") has " +
                  Bytes(disk_free) + " free, below the reserve of " + Bytes(disk_reserve) +
                  " (--min-free-bytes); it resumes by itself when space returns");
}

Result<std::unique_lock<std::mutex>> Platform::Impl::AdmitMemory(int64_t memory_bytes, int count) {
  std::unique_lock lock(admit_mu);
  int64_t limit = config.max_memory_commit;
  const int64_t ram = TotalRam();
  if (limit < 0) limit = ram + ram / 2;
  if (limit == 0) return lock;
  // An unlimited sandbox may use all of the host's memory: it commits that much.
  auto commit_of = [&](int64_t m) { return m > 0 ? m : ram; };
  int64_t committed = 0;
  {
    std::lock_guard cl(commit_mu);
    if (!commit_loaded) {
      auto recs = store->ListSandboxes();
      if (!recs) return tl::unexpected(recs.error());
      commit_by_id.clear();
      committed_total = 0;
      for (const auto& r : *recs) {
        const int64_t c = CommitOf(r, ram);
        commit_by_id[r.id] = c;
        committed_total += c;
      }
      commit_loaded = true;
    }
    committed = committed_total;
  }
  const int64_t want = commit_of(memory_bytes) * count;
  if (committed + want > limit) {
    return Fail(Errc::kInsufficientStorage,
                "not enough memory: sandboxes have " + Bytes(committed) + " of memory committed, " +
                    (count > 1 ? std::to_string(count) + " more ask for " : "this one asks for ") +
                    Bytes(want) + ", and --max-memory-commit is " + Bytes(limit));
  }
  return lock;
}

void Platform::Impl::NoteCommit(const store::SandboxRecord& rec) {
  const int64_t c = CommitOf(rec, TotalRam());
  std::lock_guard cl(commit_mu);
  if (!commit_loaded) return;  // the first admission reads the store
  int64_t& slot = commit_by_id[rec.id];
  committed_total += c - slot;
  slot = c;
}

void Platform::Impl::ForgetCommit(const std::string& id) {
  std::lock_guard cl(commit_mu);
  auto it = commit_by_id.find(id);
  if (it == commit_by_id.end()) return;
  committed_total -= it->second;
  commit_by_id.erase(it);
}

void Platform::Impl::GuardTick() {
  RefreshDisk();
  std::vector<std::shared_ptr<Sandbox>> all;
  {
    std::lock_guard lock(mu);
    for (auto& [id, sb] : sandboxes) all.push_back(sb);
  }
  const int64_t now = NowUnixMillis();
  const bool retention = (config.output_retention_s > 0 || config.output_retention_bytes > 0) &&
                         now >= retention_due_ms;
  if (retention) retention_due_ms = now + 10000;
  for (auto& sb : all) {
    if (retention) {
      // Finished commands' output, oldest first: past its age, or while over the budget.
      std::vector<store::CommandRecord> done;
      if (auto cmds = store->ListCommands(sb->rec.id)) {
        for (auto& c : *cmds) {
          if (c.state != "running" && c.state != "starting") done.push_back(std::move(c));
        }
      }
      std::sort(done.begin(), done.end(),
                [](const auto& a, const auto& b) { return a.ended_ms < b.ended_ms; });
      for (const auto& c : done) {
        const bool old = config.output_retention_s > 0 && c.ended_ms > 0 &&
                         now - c.ended_ms > config.output_retention_s * 1000;
        const bool over = config.output_retention_bytes > 0 &&
                          sb->output_stored.load() > config.output_retention_bytes;
        if (!old && !over) continue;
        if (store::OutputSize(LogDir(sb->rec.id), c.id, store::OutputStream::kStdout) == 0 &&
            store::OutputSize(LogDir(sb->rec.id), c.id, store::OutputStream::kStderr) == 0)
          continue;
        if (self->DeleteOutput(sb->rec.id, c.id))
          spdlog::info("sandbox {}: output of {} pruned (retention)", sb->rec.id, c.id);
      }
    }
    if (!sb->output_held) continue;
    const int64_t quota = sb->output_quota;
    bool exiting = false;  // an exited command waits for its last output (or its record)
    {
      std::lock_guard cl(sb->cmd_mu);
      for (auto& [id, cmd] : sb->commands) {
        std::lock_guard ml(cmd->mu);
        exiting |= !cmd->drain && (cmd->discard || (cmd->exit_pending && !disk_low));
      }
    }
    const bool room = !disk_low && (quota <= 0 || sb->output_stored.load() < quota);
    if (!exiting && !room) {
      // Ask now and then (sooner after a signal) whether held commands have ended: the
      // HELLO says so, and its retransmission then brings their last output (NoteHello).
      if (now < sb->probe_due_ms) continue;
      sb->probe_due_ms = now + 5000;
      std::unique_lock l(sb->mu, std::try_to_lock);
      if (l.owns_lock() && sb->session && sb->session->connected()) (void)sb->session->RequestHello();
      continue;
    }
    std::unique_lock l(sb->mu, std::try_to_lock);
    if (!l.owns_lock()) continue;  // busy: look again next round
    if (!sb->session || !sb->session->connected()) continue;
    sb->output_held = false;
    {
      std::lock_guard cl(sb->cmd_mu);
      for (auto& [id, cmd] : sb->commands) {
        std::lock_guard ml(cmd->mu);
        if (cmd->discard || (cmd->exit_pending && !disk_low)) cmd->drain = true;
        if (cmd->held.empty()) continue;
        if (cmd->rec.reason == cmd->held) cmd->rec.reason.clear();
        cmd->held.clear();
        self->notifier().Notify("cmd:" + sb->rec.id + ":" + id);
      }
    }
    spdlog::info("sandbox {}: output resumes", sb->rec.id);
    if (auto st = sb->session->RequestHello(); !st) sb->output_held = true;
  }
}

Status Platform::DeleteOutput(const std::string& sandbox_id, const std::string& cid) {
  auto sb = impl_->Find(sandbox_id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + sandbox_id);
  if (!IsValidId(cid, "cmd")) return Fail(Errc::kNotFound, "no command " + cid);
  // Removes the command's two log files and takes their size off the sandbox's total.
  auto RemoveOutputFiles = [&]() -> Status {
    const std::string dir = impl_->LogDir(sandbox_id);
    for (auto s : {store::OutputStream::kStdout, store::OutputStream::kStderr}) {
      const std::string path = store::OutputPath(dir, cid, s);
      struct stat st;
      if (::stat(path.c_str(), &st) != 0) continue;
      if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoFail("delete " + path);
      sb->output_stored -= st.st_size;
    }
    return Ok();
  };
  std::shared_ptr<Command> live;
  {
    std::lock_guard l(sb->cmd_mu);
    if (auto it = sb->commands.find(cid); it != sb->commands.end()) live = it->second;
  }
  if (live) {
    // A process that has ended but whose output is held (its exit waits for it) may have
    // its output deleted: that is how a flood on a full disk is cleared.
    std::lock_guard l(live->mu);
    if (!(live->exit_pending || live->process_ended) || live->held.empty())
      return Fail(Errc::kConflict, "command " + cid + " is running; its output can be deleted once it has ended");
    live->discard = true;
    live->held.clear();
    sb->output_held = true;  // GuardTick asks the agent for the rest (and the exit)
    return RemoveOutputFiles();
  }
  auto rec = impl_->store->GetCommand(sandbox_id, cid);
  if (!rec) return tl::unexpected(rec.error());
  if (rec->state == "running" || rec->state == "starting")
    return Fail(Errc::kConflict, "command " + cid + " is running");
  SPACE_TRY(RemoveOutputFiles());
  if (sb->output_stored.load() < 0) sb->output_stored = 0;
  notifier_.Notify("cmd:" + sandbox_id + ":" + cid);
  return Ok();
}

Result<store::SandboxRecord> Platform::SetLimits(const std::string& id, const Json& limits) {
  if (!limits.is_object()) return Fail(Errc::kInvalidArgument, "limits must be an object");
  auto sb = impl_->Find(id);
  if (!sb) return Fail(Errc::kNotFound, "no sandbox " + id);
  int64_t output_bytes = -1;
  for (const auto& [k, v] : limits.items()) {
    if (k != "output_bytes")
      return Fail(Errc::kInvalidArgument,
                  "limits." + k + " cannot be changed on an existing sandbox (only output_bytes)");
    if (!v.is_number_integer() || v.get<int64_t>() < 0)
      return Fail(Errc::kInvalidArgument, "limits.output_bytes must be a non-negative integer");
    output_bytes = v.get<int64_t>();
  }
  std::lock_guard l(sb->mu);
  if (sb->rec.state == "deleting" || sb->rec.state == "error")
    return Fail(Errc::kConflict, "sandbox " + id + " is " + sb->rec.state);
  if (output_bytes >= 0) {
    if (!sb->rec.spec.contains("limits") || !sb->rec.spec["limits"].is_object())
      sb->rec.spec["limits"] = Json::object();
    sb->rec.spec["limits"]["output_bytes"] = output_bytes;
    SPACE_TRY(impl_->SaveSandbox(*sb));
    sb->output_quota = output_bytes;
  }
  return sb->rec;
}

}  // namespace space::core
