// Fuzz target template_spec: the template spec (Dockerfile subset) parser, through the entry
// point template/ provides for fuzzing. FuzzParseSpec checks the parser's own promises (line
// numbers, absolute paths, no ".." in COPY sources, stable cache keys) and aborts on a breach.
#include <cstddef>
#include <cstdint>

#include "template/template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return space::tmpl::FuzzParseSpec(data, size);
}
