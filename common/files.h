// Output files: every write checked, regular files replaced through a temporary file and a rename,
// devices and pipes written in place, and outputs that would overwrite an input refused.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

/// Writes all of `bytes` to `fd`, retrying short writes and EINTR. Throws Error(kRuntime)
/// "cannot write <quoted path>: <strerror>" on the first failed write (`path` names the file in
/// the message only).
void write_fd_fully(int fd, std::string_view bytes, const std::string& path);

/// Replaces the file at `path` with `bytes`. A regular file (or a path that does not exist yet) is
/// written to "<path>.tmp.<pid>" in the same folder, flushed to disk and renamed over `path`, so a
/// crash or a full disk never leaves a half-written file and the old content survives a failed
/// write; a symbolic link keeps pointing at the file it names, which is the one replaced. Any
/// other existing target (a device such as /dev/null, a pipe) is opened and written in place,
/// never replaced. Throws Error(kBadInput) naming the path and errno when the file cannot be
/// created or opened, Error(kRuntime) when a write, flush or rename fails (the temporary file is
/// removed).
void write_file_atomic(const std::string& path, std::string_view bytes);

/// One output of a command: where it goes and what it holds.
struct OutputContent {
  std::string path;
  std::string bytes;
};

/// Writes several outputs of one command all or none: every regular file is first written to its
/// temporary file and flushed, devices are written in place, and only then are the temporary
/// files renamed over their targets. A failure before the renames removes every temporary file
/// and leaves every target as it was. Throws as write_file_atomic.
void write_files_atomic(const std::vector<OutputContent>& outputs);

/// Checks that the parent folder of `path` exists and that a file can be created there, or, for
/// an existing target that is no regular file (a device), that it can be written; `field` names
/// the flag in the error. Call before long work so that it fails fast.
void check_writable(const std::string& path, std::string_view field);

/// A file named on the command line with the flag that named it ("" path: not given).
struct PathFlag {
  std::string_view flag;  ///< "-o", "--profile", ...
  std::string path;
};

/// Refuses an output that is one of the inputs (the same file, through any path or link) or the
/// same file as another output: writing it would replace what is read or written. Paths that
/// are "", inputs that do not exist (a zoo model name) and devices (/dev/null) are skipped. Throws
/// Error(kBadInput) naming both flags and the path.
void check_outputs_distinct(const std::vector<PathFlag>& outputs,
                            const std::vector<PathFlag>& inputs);

/// A file written line by line while a command runs (train's --log): opened truncated or for
/// appending, each write checked and flushed to the kernel at once, so that a full disk ends the
/// command with the path and errno instead of leaving an empty file. Not thread-safe.
class OutputFile {
 public:
  /// Opens `path`; `append` keeps what is there. Throws Error(kBadInput) naming `field` and the
  /// path when it cannot be opened.
  OutputFile(const std::string& path, bool append, std::string_view field);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// Writes `text` (with no newline added). Throws Error(kRuntime) naming the path and errno.
  void write(std::string_view text);
  /// Closes the file, reporting a failure of the close (some file systems report a full disk
  /// only then). Throws Error(kRuntime) naming the path and errno. Idempotent.
  void close();

 private:
  std::string path_;
  int fd_ = -1;
};

/// Flushes `stream` (stdout at the end of a command) and throws Error(kRuntime) "cannot write
/// <name>: <strerror>" when that or any earlier write to it failed.
void check_stream_written(std::FILE* stream, std::string_view name);

}  // namespace pipeplan
