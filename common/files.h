// Input and output files: inputs read only from regular files of a bounded size; every write
// checked, regular files replaced through a temporary file and a rename, devices and pipes
// written in place, and outputs that would overwrite an input refused.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace pipeplan {

/// Checks, before anything opens it, that `path` names (through any links) a regular file of
/// at most `max_bytes` bytes, and returns its size: a FIFO would block its reader and a device
/// such as /dev/zero never end. Throws Error(kBadInput) "<path>: ..." saying what it is instead:
/// missing or unreadable (errno, a loop of links included), a folder, FIFO or device, or larger.
int64_t check_input_file(const std::string& path, int64_t max_bytes);

/// The bytes of the file `path`, which check_input_file accepts: opened without waiting (were
/// it replaced by a FIFO since) and read up to the size it had, however it grows. When the file
/// is larger than `start_bytes`, `check_start` first sees its first `start_bytes` and may throw,
/// so that a file bad from its start fails before it is read whole. Throws Error(kBadInput) as
/// check_input_file does, or "<path>: cannot read: <errno>".
std::string read_file_bytes(const std::string& path, int64_t max_bytes, size_t start_bytes = 0,
                            const std::function<void(std::string_view start)>& check_start = {});

/// Writes all of `bytes` to `fd`, retrying short writes and EINTR. Throws Error(kRuntime)
/// "cannot write <quoted path>: <strerror>" on the first failed write (`path` names the file in
/// the message only).
void write_fd_fully(int fd, std::string_view bytes, const std::string& path);

/// Replaces the file at `path` with `bytes`. A regular file (or a path that does not exist yet) is
/// written to "<path>.tmp.<pid>" in the same folder, flushed to disk and renamed over `path`, so a
/// crash or a full disk never leaves a half-written file and the old content survives a failed
/// write; a symbolic link keeps pointing at the file it names, which is the one replaced. Any
/// other existing target (a device such as /dev/null, a pipe) is opened and written in place,
/// never replaced; a FIFO that no process opens for reading within 2 s is refused. Throws
/// Error(kBadInput) naming the path and errno when the file cannot be created or opened,
/// Error(kRuntime) when a write, flush or rename fails (the temporary file is removed).
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
  /// path when it cannot be opened (a FIFO no process reads included, as write_file_atomic).
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

/// A path one file records of another (a run's plan, a plan's profile): as written when it is
/// absolute or exists from the current folder, else beside `referrer` when it exists there, else
/// as written (to be refused when read).
std::string recorded_path(const std::string& recorded, const std::string& referrer);

}  // namespace pipeplan
