// Tests for common/files.h: checked writes, devices written in place, the old file kept when a
// write fails, and outputs that would replace an input refused.
#include "common/files.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "tests/common/file_size_limit.h"

namespace pipeplan {
namespace {

namespace fs = std::filesystem;

// The error `fn` throws; kind kInternal when it throws none.
Error error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  return Error(ErrorKind::kInternal, "no error");
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool is_character_device(const std::string& path) {
  struct stat info {};
  return ::stat(path.c_str(), &info) == 0 && S_ISCHR(info.st_mode);
}

// A fresh folder for one test.
std::string fresh_folder(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() /
                       ("pipeplan_files_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Files in `dir` whose names contain ".tmp.".
int temporary_files_in(const std::string& dir) {
  int count = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir))
    count += entry.path().filename().string().find(".tmp.") != std::string::npos;
  return count;
}

using testing::FileSizeLimit;

TEST(CommonFilesTest, AFullDeviceFailsNamingThePathAndErrno) {
  const Error error = error_of([] { write_file_atomic("/dev/full", "text\n"); });
  EXPECT_EQ(error.kind(), ErrorKind::kRuntime);
  EXPECT_STREQ(error.what(), "cannot write '/dev/full': No space left on device");
  EXPECT_TRUE(is_character_device("/dev/full"));
}

TEST(CommonFilesTest, AClosedDescriptorFailsNamingThePath) {
  const int fd = ::open("/dev/null", O_WRONLY);
  ASSERT_GE(fd, 0);
  ::close(fd);
  EXPECT_STREQ(error_of([fd] { write_fd_fully(fd, "x", "log.jsonl"); }).what(),
               "cannot write 'log.jsonl': Bad file descriptor");
}

TEST(CommonFilesTest, DevicesAndPipesAreWrittenInPlaceNotReplaced) {
  EXPECT_NO_THROW(write_file_atomic("/dev/null", "discarded\n"));
  EXPECT_TRUE(is_character_device("/dev/null"));
  const std::string dir = fresh_folder("fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read_text(fifo); });
  write_file_atomic(fifo, "through the pipe\n");
  reader.join();
  EXPECT_EQ(received, "through the pipe\n");
  struct stat info {};
  ASSERT_EQ(::stat(fifo.c_str(), &info), 0);
  EXPECT_TRUE(S_ISFIFO(info.st_mode));
  EXPECT_NO_THROW(check_writable("/dev/null", "--trace"));
  fs::remove_all(dir);
}

// Issue 46: `-o FIFO` and `--log FIFO` waited forever for a reader. The child is killed by an
// alarm where the open waits.
TEST(CommonFilesTest, AFifoNoProcessReadsIsRefusedNotWaitedFor) {
  const std::string dir = fresh_folder("lonely_fifo");
  const std::string fifo = dir + "/pipe";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const bool log : {false, true})
    EXPECT_EXIT(
        {
          ::alarm(10);
          const Error error = error_of([&] {
            if (log) OutputFile(fifo, /*append=*/true, "--log");
            else write_file_atomic(fifo, "x\n");
          });
          const std::string expected =
              std::string(log ? "--log: " : "") + "cannot write '" + fifo +
              "': No such device or address (a FIFO that no process opened for reading)";
          std::exit(error.kind() == ErrorKind::kBadInput && error.what() == expected ? 0 : 1);
        },
        ::testing::ExitedWithCode(0), "");
  fs::remove_all(dir);
}

TEST(CommonFilesTest, AFailedWriteKeepsTheOldFileAndLeavesNoTemporary) {
  const std::string dir = fresh_folder("full");
  const std::string path = dir + "/plan.json";
  write_file_atomic(path, "old\n");
  Error error(ErrorKind::kInternal, "no error");
  {
    const FileSizeLimit limit(/*bytes=*/4096);
    error = error_of([&] { write_file_atomic(path, std::string(64 * 1024, 'x')); });
  }
  EXPECT_EQ(error.kind(), ErrorKind::kRuntime);
  EXPECT_EQ(std::string(error.what()), "cannot write '" + path + "': File too large");
  EXPECT_EQ(read_text(path), "old\n");
  EXPECT_EQ(temporary_files_in(dir), 0);
  fs::remove_all(dir);
}

// Issue 18: `simulate --trace t.json --svg /dev/full` wrote t.json and then failed on the SVG.
TEST(CommonFilesTest, SeveralOutputsAreWrittenAllOrNone) {
  const std::string dir = fresh_folder("together");
  const std::string old_file = dir + "/trace.json";
  const std::string new_file = dir + "/compare.json";
  write_file_atomic(old_file, "old\n");
  const Error error = error_of([&] {
    write_files_atomic({{old_file, "new\n"}, {new_file, "new\n"}, {"/dev/full", "svg\n"}});
  });
  EXPECT_STREQ(error.what(), "cannot write '/dev/full': No space left on device");
  EXPECT_EQ(read_text(old_file), "old\n");
  EXPECT_FALSE(fs::exists(new_file));
  EXPECT_EQ(temporary_files_in(dir), 0);
  write_files_atomic({{old_file, "new\n"}, {new_file, "new\n"}, {"/dev/null", "svg\n"}});
  EXPECT_EQ(read_text(old_file), "new\n");
  EXPECT_EQ(read_text(new_file), "new\n");
  EXPECT_EQ(temporary_files_in(dir), 0);
  fs::remove_all(dir);
}

TEST(CommonFilesTest, ALinkKeepsPointingAtTheFileItNames) {
  const std::string dir = fresh_folder("link");
  write_file_atomic(dir + "/real.json", "old\n");
  fs::create_symlink("real.json", dir + "/link.json");
  write_file_atomic(dir + "/link.json", "new\n");
  EXPECT_TRUE(fs::is_symlink(dir + "/link.json"));
  EXPECT_EQ(read_text(dir + "/real.json"), "new\n");
  fs::remove_all(dir);
}

TEST(CommonFilesTest, RefusesAnOutputThatIsAnInputOrAnotherOutput) {
  const std::string dir = fresh_folder("same");
  const std::string profile = dir + "/p.json";
  write_file_atomic(profile, "{}\n");
  fs::create_symlink("p.json", dir + "/alias.json");
  const std::vector<PathFlag> inputs{{"--profile", profile}, {"--calibrate", ""}};
  for (const std::string& output : {profile, dir + "/./p.json", dir + "/alias.json"}) {
    const Error error = error_of([&] { check_outputs_distinct({{"-o", output}}, inputs); });
    EXPECT_EQ(error.kind(), ErrorKind::kBadInput) << output;
    EXPECT_EQ(std::string(error.what()), "-o: '" + output +
                                             "' is the --profile file; writing it would replace "
                                             "that input, give another path");
  }
  const std::string run = dir + "/run.json";  // not written yet
  const std::string same_run = dir + "/../" + fs::path(dir).filename().string() + "/run.json";
  const Error twice = error_of([&] {
    check_outputs_distinct({{"-o", run}, {"--log", same_run}}, {});
  });
  EXPECT_NE(std::string(twice.what()).find("is also the --log file"), std::string::npos);
  EXPECT_NO_THROW(check_outputs_distinct(
      {{"-o", run}, {"--trace", "/dev/null"}, {"--log", "/dev/null"}}, {{"--plan", profile}}));
  fs::remove_all(dir);
}

// Issue 46: a loop of links as an input ended with exit 1 and a raw filesystem error.
TEST(CommonFilesTest, ALoopOfLinksAsAnInputIsNoError) {
  const std::string dir = fresh_folder("loop");
  fs::create_symlink("loop.json", dir + "/loop.json");
  EXPECT_NO_THROW(check_outputs_distinct({{"-o", dir + "/plan.json"}},
                                         {{"--profile", dir + "/loop.json"}}));
  EXPECT_STREQ(error_of([&] { check_input_file(dir + "/loop.json", 100); }).what(),
               (dir + "/loop.json: cannot read: Too many levels of symbolic links").c_str());
  fs::remove_all(dir);
}

TEST(CommonFilesTest, InputsAreRegularFilesOfABoundedSize) {
  const std::string dir = fresh_folder("inputs");
  write_file_atomic(dir + "/ten.txt", "0123456789");
  EXPECT_EQ(check_input_file(dir + "/ten.txt", 10), 10);
  EXPECT_EQ(read_file_bytes(dir + "/ten.txt", 10), "0123456789");
  EXPECT_STREQ(error_of([&] { read_file_bytes(dir + "/ten.txt", 9); }).what(),
               (dir + "/ten.txt: 10 bytes: expected a file of at most 9 bytes").c_str());
  EXPECT_STREQ(error_of([&] { check_input_file(dir, 10); }).what(),
               (dir + ": not a regular file (a folder); expected a file").c_str());
  EXPECT_STREQ(error_of([] { check_input_file("/dev/null", 10); }).what(),
               "/dev/null: not a regular file (a device or socket); expected a file");
  // The start is seen first when the file is larger; what its check throws ends the read.
  std::string seen;
  EXPECT_EQ(read_file_bytes(dir + "/ten.txt", 10, /*start_bytes=*/4,
                            [&](std::string_view start) { seen = start; }),
            "0123456789");
  EXPECT_EQ(seen, "0123");
  EXPECT_STREQ(error_of([&] {
                 read_file_bytes(dir + "/ten.txt", 10, /*start_bytes=*/4, [](std::string_view) {
                   throw Error(ErrorKind::kBadInput, "bad start");
                 });
               }).what(),
               "bad start");
  fs::remove_all(dir);
}

TEST(CommonFilesTest, OutputFileChecksEveryWrite) {
  const std::string dir = fresh_folder("log");
  const std::string path = dir + "/steps.jsonl";
  {
    OutputFile log(path, /*append=*/false, "--log");
    log.write("{\"step\": 1}\n");
    log.close();
  }
  {
    OutputFile log(path, /*append=*/true, "--log");
    log.write("{\"step\": 2}\n");
  }
  EXPECT_EQ(read_text(path), "{\"step\": 1}\n{\"step\": 2}\n");
  OutputFile full("/dev/full", /*append=*/false, "--log");
  EXPECT_STREQ(error_of([&] { full.write("{}\n"); }).what(),
               "cannot write '/dev/full': No space left on device");
  EXPECT_NE(std::string(error_of([] { OutputFile("/no/such/folder/x", false, "--log"); }).what())
                .find("--log: cannot write '/no/such/folder/x'"),
            std::string::npos);
  fs::remove_all(dir);
}

TEST(CommonFilesTest, AStreamThatCouldNotBeWrittenIsReported) {
  std::FILE* full = std::fopen("/dev/full", "w");
  ASSERT_NE(full, nullptr);
  std::fputs("a table\n", full);
  EXPECT_STREQ(error_of([full] { check_stream_written(full, "standard output"); }).what(),
               "cannot write standard output: No space left on device");
  std::fclose(full);
  std::FILE* null = std::fopen("/dev/null", "w");
  std::fputs("a table\n", null);
  EXPECT_NO_THROW(check_stream_written(null, "standard output"));
  std::fclose(null);
}

}  // namespace
}  // namespace pipeplan
