// core/templates: building template trees and naming them by content digest.
//
// Pure filesystem work on directories the caller owns; thread-safe.
#pragma once

#include <string>

#include "common/common.h"

namespace space::core {

// Fills `dir` (existing, empty) with the built-in `base` template: a static busybox with
// its applets, /etc/passwd and /etc/group (root, user 1000), /root, /home/user, /tmp.
[[nodiscard]] Status BuildBaseTree(const std::string& dir, const std::string& busybox_path);

// "sha256:<hex>" over a canonical listing of the tree: every entry's relative path, type,
// mode, owner, and content (files) or target (symlinks), in sorted order.
[[nodiscard]] Result<std::string> TreeDigest(const std::string& dir);

// Splits "name:tag" (tag defaults to "latest"); validates both parts.
[[nodiscard]] Result<std::pair<std::string, std::string>> ParseTemplateRef(const std::string& ref);

}  // namespace space::core
