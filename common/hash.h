// Content hashes that tie files together (profile -> plan -> run): FNV-1a, 64 bits, as hex.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pipeplan {

/// FNV-1a over the bytes, continuing from `seed` (the FNV offset basis by default).
uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 14695981039346656037ULL);

/// "fnv1a64:" followed by 16 lower-case hex digits. Identifies content; not cryptographic.
std::string content_hash(std::string_view bytes);

/// `hash` (an fnv1a64 result, possibly chained over several pieces) as content_hash writes it.
std::string format_hash(uint64_t hash);

/// content_hash of a file's bytes (read_file_bytes, at most kMaxTensorFileBytes: it hashes
/// TorchScript files); throws Error(kBadInput) naming the path if unreadable.
std::string file_hash(const std::string& path);

/// Mixes two 64-bit values (SplitMix64 finaliser); used to derive per-layer seeds.
uint64_t mix_seed(uint64_t seed, uint64_t salt);

}  // namespace pipeplan
