// BLAS checks and the OpenBLAS kernel fix.
#include "common/blas_env.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>

namespace pipeplan {
namespace {

int collect_blas(struct dl_phdr_info* info, size_t /*size*/, void* data) {
  auto* paths = static_cast<std::vector<std::string>*>(data);
  const char* name = info->dlpi_name;
  if (name == nullptr || *name == '\0') return 0;
  const std::string base = std::filesystem::path(name).filename().string();
  if (base.find("blas") == std::string::npos) return 0;
  std::error_code ec;
  const auto real = std::filesystem::canonical(name, ec);
  paths->push_back(ec ? std::string(name) : real.string());
  return 0;
}

}  // namespace

std::string openblas_core_name() {
  using CoreNameFn = char* (*)();
  auto fn = reinterpret_cast<CoreNameFn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (fn == nullptr) return "";
  const char* name = fn();
  return name == nullptr ? "" : name;
}

std::vector<std::string> loaded_blas_libraries() {
  std::vector<std::string> paths;
  ::dl_iterate_phdr(collect_blas, &paths);
  return paths;
}

std::string best_openblas_core_type() {
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
#endif
  return "";
}

void reexec_with_best_blas_kernels(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string core = openblas_core_name();
  // Only the generic fallbacks OpenBLAS uses for CPUs it does not recognise.
  const bool generic = core == "Prescott" || core == "Core2" || core == "Nehalem" ||
                       core == "Penryn" || core == "Dunnington" || core == "Sandybridge";
  const std::string best = best_openblas_core_type();
  if (!generic || best.empty() || best == core) return;
  ::setenv("OPENBLAS_CORETYPE", best.c_str(), /*overwrite=*/1);
  ::execv("/proc/self/exe", argv);
  // execv only returns on failure: carry on with the slow kernels rather than fail.
}

}  // namespace pipeplan
