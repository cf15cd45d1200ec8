// agent/users: the sandbox's accounts, looked up in its passwd and group files (a static
// agent has no NSS): whom exec runs a command as, whom the file service writes as, and the
// names of files' owners.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/common.h"

namespace space::agent {

struct UserInfo {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups, primary gid included
  std::string name;           // empty when the uid has no passwd entry
  std::string home;           // "/" when unknown
};

// Looks `user` (a name or a decimal uid) up in the given passwd/group files. A numeric
// uid without a passwd entry is accepted with gid 0 and home "/" (as runc does); an
// unknown name is not_found.
[[nodiscard]] Result<UserInfo> LookupUser(const std::string& user,
                                          const std::string& passwd_path = "/etc/passwd",
                                          const std::string& group_path = "/etc/group");
// The same lookup in passwd and group texts already read (the file service reads them
// inside its root); `passwd_path` names the passwd file in errors.
[[nodiscard]] Result<UserInfo> LookupUserIn(const std::string& user, std::string_view passwd,
                                            std::string_view group, const std::string& passwd_path);
// The name of `id` in a passwd or group text (the first field of the line whose third is
// `id`), or "" when none has it.
std::string NameOfId(std::string_view text, uint32_t id);

}  // namespace space::agent
