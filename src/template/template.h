// template: the pure, input-validating pieces of building a SPACE template — parsing a spec
// (a Dockerfile subset), keying build steps for layer reuse, extracting tarballs safely, and
// reading OCI / `docker save` image archives.
//
// Everything here treats its input (spec text, archives, manifests) as hostile: errors are
// returned, never thrown, and carry the offending line or archive entry. Nothing here runs
// a build step, touches a sandbox or a database: core/ executes RUN steps and stores layers.
// Functions own no state between calls and are thread-safe; the filesystem functions work
// only below the directories the caller passes (and never change the process cwd or umask).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::tmpl {

// ---------------------------------------------------------------------------------------------
// Spec: a Dockerfile subset.
//
// Accepted (keywords are case-insensitive):
//   ARG NAME[=default]        before or after FROM; `${NAME}` / `$NAME` are substituted in
//                             later FROM/COPY/ENV/WORKDIR/USER lines, and RUN steps receive the
//                             ARGs in effect as environment variables (Step::run_env), as
//                             Docker does. ParseOptions::build_args overrides defaults.
//   FROM scratch | name[:tag] | sha256:<64 hex> [AS stage]   exactly one; only ARG may precede
//   RUN command...            shell form: Step::args = {command}, run by `/bin/sh -c`
//   RUN ["prog", "arg"...]    exec form (a JSON array of strings): Step::args = argv
//   COPY [--chown=u[:g]] [--chmod=0755] src... dest        also COPY ["src"..., "dest"]
//   ENV K=V K2="v w" ...  |  ENV K the rest of the line
//   WORKDIR path              relative paths resolve against the previous working directory
//   USER user[:group]
//   CMD command | CMD ["prog", "arg"...]   the template's start command (Spec::start_cmd):
//                             spaced starts it in every new sandbox of the template (the
//                             last CMD wins)
//   HEALTHCHECK [--opt=v...] CMD command | HEALTHCHECK NONE   the start command's readiness
//                             check (Spec::ready_cmd); options are ignored with a warning
//   LABEL space.allow-setuid=true|false   processes of the template's sandboxes may gain
//                             privileges through setuid programs such as sudo (no
//                             no_new_privs; docs/security.md); other labels are ignored with
//                             a warning, other `space.` labels refused
//   ENTRYPOINT EXPOSE MAINTAINER VOLUME STOPSIGNAL   ignored, with a warning
//                             (templates have no entry point or metadata)
// Variable expansion: `$V`, `${V}`, `${V:-word}`, `${V-word}`, `${V:+word}`, `${V+word}`,
// `${V:?message}`; `\$` is a literal dollar; nothing is expanded inside single quotes. A name
// is looked up in the environment (ParseOptions::base_env updated by earlier ENV lines) first,
// then in the ARGs in scope (Docker's precedence); FROM sees only ARGs declared before it. An
// unset variable expands to "" with a warning (Docker is silent). Expanded values are never
// split into more words.
// Rejected with "line N: ...": unknown instructions, ADD, ONBUILD, SHELL, a second FROM,
// FROM --platform, RUN/COPY flags other than those above (--mount, --from, --link, ...),
// heredocs (`<<EOF`), COPY sources with a `..` component or a malformed wildcard (an
// unclosed `[`, a trailing `\`), unsupported `${...}` forms, NUL bytes, and an `# escape=`
// directive other than `\`. A leading '/' on a COPY source is dropped: sources are relative
// to the build context root, as in Docker. A COPY source holding `*`, `?` or `[` is a
// wildcard, expanded against the build context when the step runs (MatchCopyPattern).
// Comments (`#` as the first non-blank character), blank lines, CRLF line ends and backslash
// continuations are accepted; a continued instruction reports its first line.
// Limits: the text is at most kMaxSpecBytes, at most kMaxInstructions instructions.

inline constexpr size_t kMaxSpecBytes = 1 << 20;
inline constexpr int kMaxInstructions = 1000;

// What FROM names.
struct FromRef {
  enum class Kind { kScratch, kNameTag, kDigest };
  Kind kind = Kind::kScratch;
  std::string name;    // kNameTag: letters, digits, '.', '-', '_' (not starting with '.')
  std::string tag;     // kNameTag: defaults to "latest"
  std::string digest;  // kDigest: "sha256:<64 lowercase hex>"
  // "scratch", "name:tag" or "sha256:...".
  std::string ToString() const;
};

enum class StepKind { kRun, kCopy, kEnv, kWorkdir, kUser };
std::string_view StepKindName(StepKind k);  // "RUN", "COPY", ...

struct Step {
  StepKind kind = StepKind::kRun;
  int line = 0;  // 1-based line of the instruction's first line in the spec
  // RUN shell form: {command} (to run as {"/bin/sh", "-c", command}, see RunArgv).
  // RUN exec form:  argv (non-empty).
  // COPY: sources (normalized, relative to the build context root, no "..", "." for the
  //       root itself; a wildcard stays a pattern, see IsCopyPattern) followed by the
  //       destination (absolute; resolved against the working directory; a trailing '/' is
  //       kept and means "into this directory").
  // ENV:  {"K=V", ...} with values already expanded.
  // WORKDIR: {absolute normalized path}. USER: {"user[:group]"}.
  std::vector<std::string> args;
  bool exec_form = false;  // RUN only
  std::string chown;       // COPY --chown value ("" if absent), expanded
  std::string chmod;       // COPY --chmod value ("" if absent), octal digits
  // RUN only: "K=V" for each ARG in effect (sorted by K), to add to the RUN's environment
  // (base env + ENV steps so far) for names ENV did not set — ENV wins, as in Docker.
  std::vector<std::string> run_env;
  std::string text;  // the instruction as written (continuations joined)
};

struct Spec {
  FromRef from;
  std::vector<Step> steps;
  // CMD and HEALTHCHECK CMD as argv (shell form: {"/bin/sh", "-c", command}); empty if none.
  std::vector<std::string> start_cmd, ready_cmd;
  // LABEL space.allow-setuid=true|false: whether the template's processes may gain
  // privileges through setuid programs (sudo), i.e. run without no_new_privs; unset: as
  // the base template has it (off for SPACE's own).
  std::optional<bool> allow_setuid;
  std::vector<std::string> warnings;  // each "line N: ..."
};
inline constexpr char kLabelAllowSetuid[] = "space.allow-setuid";

struct ParseOptions {
  // The base template's environment (its config's Env), consulted when a spec refers to a
  // variable it does not define itself (e.g. `ENV PATH=$PATH:/opt/bin`). FROM never sees it,
  // so a caller can parse once to learn `from`, resolve the base, then parse again with it.
  std::map<std::string, std::string> base_env;
  // The base template's working directory; relative WORKDIR/COPY destinations resolve
  // against it until the spec sets one. Must be absolute.
  std::string base_workdir = "/";
  // Values overriding ARG defaults (like `docker build --build-arg`). Names not declared by
  // an ARG in the spec are ignored with a warning.
  std::map<std::string, std::string> build_args;
};

// Parses a spec. Errors (kInvalidArgument; kTooLarge for the size/count limits) read
// "line N: what is wrong" whenever a line is to blame. Never blocks, never throws.
[[nodiscard]] Result<Spec> ParseSpec(std::string_view text, const ParseOptions& opts = {});

// The argv a RUN step executes: exec form as is, shell form as {"/bin/sh", "-c", command}.
std::vector<std::string> RunArgv(const Step& step);

// A stable "sha256:<hex>" naming the state after `step`, so a rebuild can reuse a stored layer
// when nothing that could change it has changed.
// - parent_digest: the state before this step — the resolved base template digest for the
//   first step (any fixed string, e.g. "scratch", for FROM scratch), the previous step's key
//   afterwards (a chain, so a change anywhere invalidates everything after it).
// - Covers the step kind, args, exec_form, chown, chmod and run_env. Not the line number or
//   the original text: moving a step or editing comments keeps the cache.
// - copy_content_digest (COPY only; ignored for other kinds): a digest of the copied sources
//   (e.g. core::TreeDigest over them), so editing a file in the build context invalidates.
// - ENV/WORKDIR/USER change the image config rather than the filesystem (WORKDIR may also
//   create its directory). They still get their own key in the chain, because every later RUN
//   sees the environment, directory and user they set; the caller may store no layer for them
//   and map the key to the parent's filesystem plus the updated config.
// Fields are length-prefixed before hashing, so no two different inputs collide by
// concatenation.
std::string StepCacheKey(const std::string& parent_digest, const Step& step,
                         const std::string& copy_content_digest);

// ---------------------------------------------------------------------------------------------
// COPY wildcards, as Docker has them (Go's filepath.Match): a source holding `*`, `?` or `[`
// is matched against the build context one '/'-separated segment at a time, as fnmatch(3)
// with FNM_PATHNAME does: `*` and `?` never match '/', `[...]` is a character class (`[!...]`
// or `[^...]` negated), `\` escapes the next character, and a leading '.' is matched like any
// other character (`*` matches dotfiles, as in Docker). A pattern of N segments names every
// file or directory of the context whose path has N segments, each matched by its own. The
// context holds regular files only (no symlinks), so nothing a pattern names is outside it.
// The builder copies each match as if it were written as a source of its own, in the order
// below (a directory's contents go into the destination, Docker's rule).

// Whether a COPY source is a wildcard pattern.
bool IsCopyPattern(std::string_view source);

// The paths of the build context `pattern` matches, each once, in the order Docker copies
// them (sorted segment by segment, as a directory walk lists them). A match is a file's path
// or a directory's (a proper prefix of some file's path). `context` maps relative paths
// ("a/b.txt": no empty, "." or ".." segment) to their contents. Empty when nothing matches.
std::vector<std::string> MatchCopyPattern(std::string_view pattern,
                                          const std::map<std::string, std::string>& context);

// ---------------------------------------------------------------------------------------------
// Tar extraction, safe against hostile archives.
//
// Formats: tar (ustar, pax, GNU), uncompressed or gzip / zstd / xz / bzip2 compressed,
// detected from the content. No external decompressor programs are ever started.
// Every entry is created with *at() system calls relative to a directory fd walked from
// dest_dir one component at a time with O_NOFOLLOW, so nothing is ever written through a
// symlink (whether it came from this archive or was already in dest_dir).
// Rejected, with an error naming the entry: absolute paths, ".." components, paths through a
// symlink, hardlinks whose target is absolute, has "..", goes through a symlink or does not
// exist in dest, char/block devices (unless skip_devices), sockets and other types, and
// archives over the size or entry limits (checked against each entry's declared size before
// any of its data is written). FIFOs, symlinks (any target: never followed), hardlinks,
// numeric uid/gid, permission bits (incl. setuid/setgid/sticky) and mtimes are preserved.
// An existing entry at a path is replaced (a directory over a directory is merged), and a
// regular file is always a fresh inode (never written through an existing hardlink).
// xattrs and ACLs are not restored.
// On error dest_dir may hold a partial extraction: extract into a scratch directory and
// discard it on failure.

struct ExtractOptions {
  uint64_t max_bytes = 16ull << 30;  // total declared size of regular files
  uint64_t max_entries = 1'000'000;
  bool skip_devices = false;  // char/block devices: skip with a warning instead of failing
  // Apply OCI/AUFS whiteouts: `.wh.NAME` removes NAME as left by lower layers, and
  // `.wh..wh..opq` removes everything lower layers left in its directory; entries of this
  // same archive are never removed by either. Whiteout files are not extracted, nor are
  // other `.wh..wh.*` AUFS metadata entries. When false, `.wh.*` files are plain files.
  bool whiteouts = false;
  bool preserve_owner = true;  // chown to the archive's numeric uid/gid (needs CAP_CHOWN)
  // Checked between entries and data blocks; when it becomes true extraction stops with
  // kDeadlineExceeded ("cancelled"). May be null.
  const std::atomic<bool>* cancel = nullptr;
};

struct ExtractStats {
  uint64_t entries = 0;  // archive entries processed (including whiteouts and skipped ones)
  uint64_t bytes = 0;    // regular-file bytes declared
  std::vector<std::string> warnings;  // e.g. "entry dev/sda: block device skipped"
};

// Extracts archive_path into dest_dir (an existing directory). Blocks on disk I/O.
// Errors: kInvalidArgument for bad or hostile content, kTooLarge for limits, kNotFound if the
// archive is missing, kDeadlineExceeded if cancelled, errno-derived codes for disk failures.
[[nodiscard]] Result<ExtractStats> ExtractTar(const std::string& archive_path,
                                              const std::string& dest_dir,
                                              const ExtractOptions& opts = {});

// ---------------------------------------------------------------------------------------------
// OCI image archives: the OCI image layout in a tar (`skopeo copy ... oci-archive:`, and
// `docker save` since Docker 25) or the classic `docker save` layout (manifest.json,
// <config>.json, <id>/layer.tar, layers deduplicated by symlinks).

struct OciImageConfig {
  std::vector<std::string> env;  // "K=V"
  std::string working_dir;
  std::string user;
  std::vector<std::string> cmd;
  std::vector<std::string> entrypoint;
  std::string os, architecture;
};

struct OciLayer {
  std::string path;        // absolute path of the (verified) blob below work_dir
  std::string digest;      // "sha256:..." of the blob as stored
  std::string media_type;  // as declared; "" for classic docker-save layers
  int64_t size = 0;
};

struct OciImage {
  enum class Layout { kOci, kDockerSave };
  Layout layout = Layout::kOci;
  std::string manifest_digest;  // kOci: the chosen image manifest; kDockerSave: ""
  std::string config_digest;    // "sha256:..." of the config blob
  OciImageConfig config;
  std::vector<OciLayer> layers;        // lowest first
  std::vector<std::string> repo_tags;  // from annotations / manifest.json, informational
};

struct OciReadOptions {
  std::string os = "linux";
  std::string architecture = "amd64";
  ExtractOptions outer;  // limits for unpacking the outer archive into work_dir
};

// Unpacks the archive into work_dir (created if missing; must be empty; owned by the caller,
// who removes it after UnpackOciImage), finds the image, verifies every blob it uses (index,
// manifest, config, layers) against its sha256 digest and declared size, and parses the
// config. From an index it picks the manifest for opts.os/opts.architecture (or the only one;
// nested indexes are followed). Classic docker-save layers are verified against the config's
// rootfs.diff_ids and the config against its file name when that is a digest.
// Rejected: JSON that is malformed or over kMaxOciJsonBytes, descriptors with non-sha256 or
// malformed digests, external `urls`, unknown layer media types, paths in manifest.json
// that are absolute or contain "..", images with several manifests and none for the platform.
// Blocks on disk I/O (hashes every layer once).
inline constexpr int64_t kMaxOciJsonBytes = 4 << 20;
[[nodiscard]] Result<OciImage> ReadOciArchive(const std::string& archive_path,
                                              const std::string& work_dir,
                                              const OciReadOptions& opts = {});

// Applies image.layers in order onto dest_dir (an existing, normally empty directory) with
// whiteouts (opts.whiteouts is forced on). opts.max_bytes / max_entries bound the total over
// all layers. Same safety and failure contract as ExtractTar.
[[nodiscard]] Result<ExtractStats> UnpackOciImage(const OciImage& image,
                                                  const std::string& dest_dir,
                                                  const ExtractOptions& opts = {});

// ---------------------------------------------------------------------------------------------
// Helpers shared with callers.

// "sha256:<hex>" of a file's bytes. Blocks on disk I/O.
[[nodiscard]] Result<std::string> Sha256File(const std::string& path);
// "sha256:<hex>" of bytes.
std::string Sha256Bytes(std::string_view data);

// A libFuzzer-style entry point for the spec parser (see spec_fuzz_entry.cc): parses the
// bytes, checks the parser's own invariants (aborting on a violation) and returns 0.
int FuzzParseSpec(const uint8_t* data, size_t size);

}  // namespace space::tmpl
