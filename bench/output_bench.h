// bench/output_bench: space_bench's output-throughput figures (see output_bench.cc).
#pragma once

#include <cstdint>
#include <string>

#include "cli/client.h"

namespace space::bench {

// Runs the output figures in sandbox `id` of the spaced behind `c` (whose data dir is
// `data_dir`) with a producer of `bytes` bytes, `rounds` times, printing them to stdout.
// Returns the process exit code: 0 when every byte arrived.
int OutputBench(client::Client& c, const std::string& id, const std::string& data_dir,
                int64_t bytes, int rounds);

}  // namespace space::bench
