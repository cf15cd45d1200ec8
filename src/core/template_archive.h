// core/template_archive: template trees as zstd tarballs — the shared template cache's
// entries (builtin_templates.cc) and the archives a cluster's nodes pull templates by
// (template_transfer.cc). Pure filesystem work; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "common/common.h"

namespace space::core {

// Hex sha256 of a file's bytes.
[[nodiscard]] Result<std::string> FileSha256(const std::string& path);

// Writes layer `dir` as a zstd tar at `out` with every uid and gid less `shift` (archives
// hold unshifted trees, so data dirs with any shift can use them). libarchive walks the
// tree (absolute paths, stored relative to `dir`) without following symlinks, and links
// hardlinks.
[[nodiscard]] Status ExportTree(const std::string& dir, const std::string& out, uint32_t shift);

// Unpacks such a tarball into `dir` with libarchive's disk writer: owners, modes and times
// as stored, nothing outside `dir` (no "..", no absolute paths, no writes through
// symlinks), device nodes skipped (sandboxes get their own /dev). The caller checks the
// tarball's sha256 first.
[[nodiscard]] Status UnpackTree(const std::string& tar, const std::string& dir);

}  // namespace space::core
