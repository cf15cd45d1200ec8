// core/template_build: what a template build asks for (POST /v1/templates), shared by the
// API and core. The build itself runs as an operation inside Platform (template_build.cc):
// a Dockerfile-subset spec executed step by step in throwaway build sandboxes, or an import
// of a tarball, an OCI/docker-save archive or a host directory.
//
// Plain data; no state; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace space::core {

// The largest total size of the files of a build context sent with a spec.
inline constexpr uint64_t kMaxBuildContextBytes = 16ull << 20;

struct TemplateBuildRequest {
  std::string name;  // template name; validated like any template ref
  std::string tag;   // "" = "latest"
  // Exactly one of the four sources:
  std::string spec;              // Dockerfile-subset text (see template/template.h)
  std::string tarball_path;      // absolute host path of a (compressed) tar of a rootfs
  std::string oci_archive_path;  // absolute host path of an OCI or docker-save archive
  std::string directory;         // absolute host path of a rootfs directory
  // spec only: the files COPY reads, relative path -> bytes (total <= kMaxBuildContextBytes).
  std::map<std::string, std::string> context;
  std::map<std::string, std::string> build_args;  // spec only: ARG overrides
  bool network = false;                           // spec only: RUN steps get network access
};

}  // namespace space::core
