// Content hashes: FNV-1a 64 and seed mixing.
#include "common/hash.h"

#include <cstdio>
#include <limits>

#include "common/files.h"
#include "common/limits.h"

namespace pipeplan {

uint64_t fnv1a64(std::string_view bytes, uint64_t seed) {
  constexpr uint64_t kPrime = 1099511628211ULL;
  uint64_t hash = seed;
  for (unsigned char byte : bytes) {
    hash ^= byte;
    hash *= kPrime;
  }
  return hash;
}

std::string content_hash(std::string_view bytes) { return format_hash(fnv1a64(bytes)); }

std::string format_hash(uint64_t hash) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(hash));
  return std::string("fnv1a64:") + hex;
}

std::string file_hash(const std::string& path) {
  return content_hash(read_file_bytes(path, kMaxTensorFileBytes));
}

uint64_t mix_seed(uint64_t seed, uint64_t salt) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (salt + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

}  // namespace pipeplan
