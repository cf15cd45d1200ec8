// daemon/datadir_lock: one spaced per data dir.
//
// spaced holds an exclusive flock(2) on DATA_DIR/spaced.lock for its whole life. The kernel
// drops the lock when the holder dies, however it dies (kill -9 included), so a lock is
// never stale. The file holds the holder's pid, for the refusal message of a second spaced.
#pragma once

#include <string>

#include "common/common.h"
#include "sys/sys.h"

namespace space::daemon {

// Takes the lock without waiting. kConflict, naming the holder's pid, when another process
// holds it. The returned fd is close-on-exec (crun and QEMU must not inherit the lock) and
// must stay open while spaced runs.
[[nodiscard]] Result<sys::UniqueFd> LockDataDir(const std::string& data_dir);

}  // namespace space::daemon
