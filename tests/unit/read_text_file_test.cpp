// The one reader of files the user names: the whole text, or an InputError that names the file
// and why; with a cap, a file past it is refused without being read whole.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "common/text.hpp"
#include "trainfit/error.hpp"

namespace trainfit::detail {
namespace {

std::string error_of(const std::string& path, std::optional<std::size_t> cap = std::nullopt) {
  try {
    (void)read_text_file(path, "test file", cap);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

std::string write(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadTextFile, WholeTextUpToAndAtTheCap) {
  const std::string big(200000, 'x');  // longer than one read chunk
  EXPECT_EQ(read_text_file(write("big.txt", big), "test file"), big);
  EXPECT_EQ(read_text_file(write("exact.txt", "12345"), "test file", 5), "12345");
  EXPECT_EQ(read_text_file(write("empty.txt", ""), "test file", 5), "");
}

TEST(ReadTextFile, PastTheCapIsRefused) {
  const std::string path = write("over.txt", std::string(1025, 'x'));
  EXPECT_EQ(error_of(path, 1024), "test file '" + path + "' is larger than 1.0 KiB");
  EXPECT_EQ(error_of(path), "(accepted)");
}

TEST(ReadTextFile, MissingFileAndDirectoryAreNamed) {
  EXPECT_EQ(error_of("/nonexistent/dir/x.toml"), "cannot read test file '/nonexistent/dir/x.toml': no such file");
  const std::string dir = ::testing::TempDir();
  EXPECT_EQ(error_of(dir), "cannot read test file '" + dir + "': it is a directory");
}

// The line reader of files of many rows: each line once, numbered, whatever the chunking.
std::vector<std::pair<int, std::string>> lines_of(const std::string& path, LineLimits limits = {100, 1000}) {
  std::vector<std::pair<int, std::string>> out;
  for_each_line(path, "test file", limits, [&](int n, std::string_view line) { out.emplace_back(n, std::string(line)); });
  return out;
}

std::string line_error(const std::string& path, LineLimits limits) {
  try {
    (void)lines_of(path, limits);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

TEST(ForEachLine, EveryLineNumberedWithOrWithoutTheLastNewline) {
  using Lines = std::vector<std::pair<int, std::string>>;
  EXPECT_EQ(lines_of(write("l1.txt", "a\n\nbc\n")), (Lines{{1, "a"}, {2, ""}, {3, "bc"}}));
  EXPECT_EQ(lines_of(write("l2.txt", "a\nbc")), (Lines{{1, "a"}, {2, "bc"}}));
  EXPECT_EQ(lines_of(write("l3.txt", "")), Lines{});
  // Lines that straddle the 64 KiB chunks come out whole.
  std::string text;
  for (int i = 0; i < 30000; ++i) text += std::to_string(i) + "\n";
  const auto many = lines_of(write("l4.txt", text), {100, 1 << 20});
  ASSERT_EQ(many.size(), 30000u);
  for (int i = 0; i < 30000; ++i) ASSERT_EQ(many[static_cast<std::size_t>(i)].second, std::to_string(i));
}

// A line past the cap is refused by its number before it is held whole, a file past the total cap
// by its size: /dev/zero (one endless line) stops at the line cap, in bounded memory.
TEST(ForEachLine, LongLinesAndLargeFilesAreRefused) {
  const std::string path = write("long.txt", "short\n" + std::string(101, 'x') + "\n");
  EXPECT_EQ(line_error(path, {100, 1000}), path + ":2: line 2 is longer than 100 B");
  EXPECT_EQ(line_error(path, {101, 1000}), "(accepted)");
  EXPECT_EQ(line_error(path, {200, 50}), "test file '" + path + "' is larger than 50 B");
  EXPECT_EQ(line_error("/dev/zero", {1 << 20, std::size_t{1} << 30}), "/dev/zero:1: line 1 is longer than 1.0 MiB");
  // Empty lines forever end at the file cap, not never.
  EXPECT_EQ(line_error(write("blank.txt", std::string(2000, '\n')), {100, 1000}),
            "test file '" + ::testing::TempDir() + "/blank.txt' is larger than 1000 B");
  EXPECT_EQ(line_error(::testing::TempDir(), {100, 1000}), "cannot read test file '" + ::testing::TempDir() + "': it is a directory");
}

// Writes are checked to the end: a device that takes nothing is an error naming the file.
TEST(WriteTextFile, WritesAndReportsAFailedWrite) {
  const std::string path = ::testing::TempDir() + "/written.txt";
  write_text_file(path, "hello\n");
  EXPECT_EQ(read_text_file(path, "test file"), "hello\n");
  try {
    write_text_file("/dev/full", "x");
    ADD_FAILURE() << "a write to /dev/full succeeded";
  } catch (const SystemError& e) {
    EXPECT_EQ(std::string(e.what()), "cannot write '/dev/full': No space left on device");
  }
  EXPECT_THROW(write_text_file("/nonexistent/dir/x.toml", "x"), SystemError);
}

TEST(ReadFileTail, TheLastBytesOnlyAndNothingWhenUnreadable) {
  std::string text;
  for (int i = 0; i < 100000; ++i) text += std::to_string(i % 10);
  const std::string path = write("log.txt", text);
  EXPECT_EQ(read_file_tail(path, 1000), text.substr(text.size() - 1000));
  EXPECT_EQ(read_file_tail(path, 1 << 20), text);  // smaller than the cap: whole
  EXPECT_EQ(read_file_tail("/nonexistent/log.txt", 100), "");
  // /proc files say they are empty; they are read from the start.
  EXPECT_NE(read_file_tail("/proc/self/stat", 4096).find(')'), std::string::npos);
}

}  // namespace
}  // namespace trainfit::detail
