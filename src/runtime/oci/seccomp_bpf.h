// oci/seccomp_bpf: compiles an OCI seccomp profile (linux.seccomp of config.json) into the
// raw classic-BPF program the kernel loads, with libseccomp, following crun's reading of
// the profile (rules whose action is the default are skipped, unknown syscall names are
// skipped, several conditions on one argument become separate rules).
//
// crun compiles the profile on every `crun run` (~25 ms for SPACE's allow-list on this
// host); handing it the compiled program in the `run.oci.seccomp_bpf_data` annotation
// skips that. The program is the same for every sandbox, so the runtime compiles it once.
#pragma once

#include <string>

#include "common/common.h"
#include "common/json.h"

namespace space::runtime::oci {

// The BPF program (an array of struct sock_filter) for `profile`.
[[nodiscard]] Result<std::string> CompileSeccompBpf(const Json& profile);

}  // namespace space::runtime::oci
