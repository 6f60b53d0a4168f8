// Input and output files: regular-file checks and bounded reads of inputs; checked writes,
// temporary file and rename for regular files, in-place writes for devices, and the
// output-is-an-input check.
#include "common/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <thread>

#include "common/error.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

// How long an output that is a FIFO waits for a process to open it for reading, and how often it
// looks: a command never hangs on a FIFO nobody reads.
constexpr std::chrono::seconds kFifoReaderWait{2};
constexpr std::chrono::milliseconds kFifoReaderPoll{10};

[[noreturn]] void fail_write(const std::string& path, int err) {
  throw Error(ErrorKind::kRuntime,
              detail::concat("cannot write ", quote(path), ": ", std::strerror(err)));
}

// True when `path` exists and, followed through links, is something other than a regular file
// or a folder: a device, a pipe or a socket, which are written in place.
bool is_special_target(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return false;
  return !S_ISREG(info.st_mode) && !S_ISDIR(info.st_mode);
}

// ::open, retrying EINTR, without blocking (O_NONBLOCK), as only a FIFO would: for reading, one
// that no process writes opens at once; for writing, one that no process reads fails with ENXIO,
// retried until kFifoReaderWait has passed (its reader may be starting beside this command). The
// file is then blocking again, so that reads and writes wait as usual.
int open_now(const std::string& path, int flags) {
  const auto deadline = std::chrono::steady_clock::now() + kFifoReaderWait;
  for (;;) {
    const int fd = ::open(path.c_str(), flags | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd >= 0) {
      ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
      return fd;
    }
    if (errno == EINTR) continue;
    if (errno != ENXIO || std::chrono::steady_clock::now() >= deadline) return -1;
    std::this_thread::sleep_for(kFifoReaderPoll);
  }
}

// Opens `path` with `flags` for writing (open_now); errors name `shown` (the file the user
// named). A path the user can fix (no such folder, no permission, a FIFO no process reads) is
// bad input; anything else (no space left for a new file, too many open files) a runtime failure.
int open_checked(const std::string& path, const std::string& shown, int flags,
                 std::string_view field) {
  const int fd = open_now(path, flags);
  if (fd >= 0) return fd;
  const int err = errno;
  const bool users_path = err == ENOENT || err == ENOTDIR || err == EACCES || err == EPERM ||
                          err == EISDIR || err == EROFS || err == ENAMETOOLONG || err == ELOOP ||
                          err == ENXIO;
  throw Error(users_path ? ErrorKind::kBadInput : ErrorKind::kRuntime,
              detail::concat(field, field.empty() ? "" : ": ", "cannot write ", quote(shown), ": ",
                             std::strerror(err),
                             err == ENXIO ? " (a FIFO that no process opened for reading)" : ""));
}

// Reads up to `size` bytes from `fd` into `out` from offset `done`; returns the offset reached
// (less than `size` at the end of the file).
size_t read_up_to(int fd, std::string* out, size_t done, size_t size, const std::string& path) {
  while (done < size) {
    const ssize_t got = ::read(fd, out->data() + done, size - done);
    if (got < 0 && errno == EINTR) continue;
    PIPEPLAN_CHECK(got >= 0, path, ": cannot read: ", std::strerror(errno));
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void write_in_place(const std::string& path, std::string_view bytes) {
  const int fd = open_checked(path, path, O_WRONLY | O_TRUNC, "");
  try {
    write_fd_fully(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    throw;
  }
  if (::close(fd) != 0) fail_write(path, errno);
}

// Writes `bytes` to "<path>.tmp.<pid>" and flushes it to disk; returns that name. The temporary
// file is removed on any failure.
std::string write_temporary(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = open_checked(tmp, path, O_WRONLY | O_CREAT | O_TRUNC, "");
  try {
    write_fd_fully(fd, bytes, path);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  int err = 0;
  if (::fsync(fd) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  if (err == 0) return tmp;
  ::unlink(tmp.c_str());
  fail_write(path, err);
}

// The regular file a path names: the target of a symbolic link, so that the link survives.
std::string regular_target(const std::string& path) {
  std::error_code ec;
  const fs::path target = fs::is_symlink(path, ec) ? fs::canonical(path, ec) : fs::path(path);
  return ec ? path : target.string();
}

// One output to write: where, and the bytes (owned by the caller).
struct PendingWrite {
  std::string path;
  std::string_view bytes;
};

// Regular files first to their temporary files, then devices in place, then the renames: a
// failure before the renames removes every temporary file and leaves every target as it was;
// a failed rename leaves the targets renamed before it replaced.
void write_together(const std::vector<PendingWrite>& writes) {
  std::vector<const PendingWrite*> in_place;
  std::vector<std::pair<std::string, std::string>> staged;  // temporary file, target
  try {
    for (const PendingWrite& write : writes) {
      if (is_special_target(write.path)) {
        in_place.push_back(&write);
        continue;
      }
      const std::string target = regular_target(write.path);
      staged.emplace_back(write_temporary(target, write.bytes), target);
    }
    for (const PendingWrite* write : in_place) write_in_place(write->path, write->bytes);
  } catch (...) {
    for (const auto& [tmp, target] : staged) ::unlink(tmp.c_str());
    throw;
  }
  for (size_t idx = 0; idx < staged.size(); ++idx) {
    if (std::rename(staged[idx].first.c_str(), staged[idx].second.c_str()) == 0) continue;
    const int err = errno;
    for (size_t rest = idx; rest < staged.size(); ++rest) ::unlink(staged[rest].first.c_str());
    fail_write(staged[idx].second, err);
  }
}

// Two paths name the same file: the same inode, or (for files not created yet) the same
// absolute path once `.`, `..` and links of existing parents are resolved.
bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  const fs::path canonical_a = fs::weakly_canonical(a, ec);
  if (ec) return false;
  const fs::path canonical_b = fs::weakly_canonical(b, ec);
  return !ec && canonical_a == canonical_b;
}

}  // namespace

int64_t check_input_file(const std::string& path, int64_t max_bytes) {
  struct stat info {};
  PIPEPLAN_CHECK(!path.empty(), "an empty path; expected a file");
  PIPEPLAN_CHECK(::stat(path.c_str(), &info) == 0, path, ": cannot read: ", std::strerror(errno));
  PIPEPLAN_CHECK(S_ISREG(info.st_mode), path, ": not a regular file (a ",
                 S_ISDIR(info.st_mode)    ? "folder"
                 : S_ISFIFO(info.st_mode) ? "FIFO"
                                          : "device or socket",
                 "); expected a file");
  PIPEPLAN_CHECK(info.st_size <= max_bytes, path, ": ", info.st_size,
                 " bytes: expected a file of at most ", max_bytes, " bytes");
  return static_cast<int64_t>(info.st_size);
}

std::string read_file_bytes(const std::string& path, int64_t max_bytes, size_t start_bytes,
                            const std::function<void(std::string_view start)>& check_start) {
  const auto size = static_cast<size_t>(check_input_file(path, max_bytes));
  const int fd = open_now(path, O_RDONLY);
  PIPEPLAN_CHECK(fd >= 0, path, ": cannot read: ", std::strerror(errno));
  std::string bytes;
  try {
    struct stat info {};
    PIPEPLAN_CHECK(::fstat(fd, &info) == 0 && S_ISREG(info.st_mode), path,
                   ": not a regular file any more; expected a file");
    size_t done = 0;
    if (check_start && size > start_bytes) {  // the start alone, before the whole is allocated
      bytes.resize(start_bytes);
      done = read_up_to(fd, &bytes, 0, start_bytes, path);
      check_start(std::string_view(bytes.data(), done));
    }
    // One read into a buffer of the file's size: a stringstream copies the bytes twice, which a
    // profile of tens of megabytes feels.
    bytes.resize(size);
    bytes.resize(read_up_to(fd, &bytes, done, size, path));
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return bytes;
}

void write_fd_fully(int fd, std::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t written = ::write(fd, bytes.data(), bytes.size());
    if (written < 0 && errno == EINTR) continue;
    // A write of 0 bytes to a regular file means no space was left to write one more.
    if (written <= 0) fail_write(path, written < 0 ? errno : ENOSPC);
    bytes.remove_prefix(static_cast<size_t>(written));
  }
}

void write_file_atomic(const std::string& path, std::string_view bytes) {
  write_together({{path, bytes}});
}

void write_files_atomic(const std::vector<OutputContent>& outputs) {
  std::vector<PendingWrite> writes;
  for (const OutputContent& output : outputs) writes.push_back({output.path, output.bytes});
  write_together(writes);
}

void check_writable(const std::string& path, std::string_view field) {
  PIPEPLAN_CHECK(!path.empty(), field, ": empty output path");
  if (is_special_target(path)) {
    PIPEPLAN_CHECK(::access(path.c_str(), W_OK) == 0, field, ": cannot write ", quote(path), ": ",
                   std::strerror(errno));
    return;
  }
  const fs::path parent = fs::path(path).parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  std::error_code ec;
  PIPEPLAN_CHECK(fs::is_directory(folder, ec), field, ": cannot write ", quote(path), ": folder ",
                 quote(folder.string()), " does not exist");
  PIPEPLAN_CHECK(!fs::is_directory(path, ec), field, ": cannot write ", quote(path),
                 ": it is a folder");
  PIPEPLAN_CHECK(::access(folder.c_str(), W_OK) == 0, field, ": cannot write ", quote(path), ": ",
                 std::strerror(errno));
}

void check_outputs_distinct(const std::vector<PathFlag>& outputs,
                            const std::vector<PathFlag>& inputs) {
  for (size_t out_idx = 0; out_idx < outputs.size(); ++out_idx) {
    const PathFlag& out = outputs[out_idx];
    if (out.path.empty() || is_special_target(out.path)) continue;
    std::error_code ec;  // an input that cannot be looked at (a loop of links) is no output
    for (const PathFlag& in : inputs)
      PIPEPLAN_CHECK(in.path.empty() || !fs::exists(in.path, ec) || !same_file(out.path, in.path),
                     out.flag, ": ", quote(out.path), " is the ", in.flag,
                     " file; writing it would replace that input, give another path");
    for (size_t other_idx = out_idx + 1; other_idx < outputs.size(); ++other_idx) {
      const PathFlag& other = outputs[other_idx];
      PIPEPLAN_CHECK(other.path.empty() || !same_file(out.path, other.path), out.flag, ": ",
                     quote(out.path), " is also the ", other.flag,
                     " file; give each output its own path");
    }
  }
}

OutputFile::OutputFile(const std::string& path, bool append, std::string_view field)
    : path_(path),
      fd_(open_checked(path, path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), field)) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
}

void OutputFile::write(std::string_view text) {
  PIPEPLAN_ASSERT(fd_ >= 0, "write to closed ", path_);
  write_fd_fully(fd_, text, path_);
}

void OutputFile::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail_write(path_, errno);
}

void check_stream_written(std::FILE* stream, std::string_view name) {
  errno = 0;
  const bool flushed = std::fflush(stream) == 0;
  const int err = errno;
  if (flushed && !std::ferror(stream)) return;
  throw Error(ErrorKind::kRuntime,
              detail::concat("cannot write ", name, ": ",
                             err != 0 ? std::strerror(err) : "an earlier write failed"));
}

std::string recorded_path(const std::string& recorded, const std::string& referrer) {
  namespace fs = std::filesystem;
  std::error_code ec;  // a path that cannot be looked at is read as given and refused then
  const fs::path written(recorded);
  if (written.is_absolute() || fs::exists(written, ec)) return recorded;
  const fs::path beside = fs::path(referrer).parent_path() / written;
  return fs::exists(beside, ec) ? beside.string() : recorded;
}

}  // namespace pipeplan
