#include "launcher/job_status_file.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <optional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/test_temp_dir.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

TEST(JobStatusFile, WrittenPrivateReadBackAndRemoved) {
  TestTempDir temp;
  const std::string dir = temp.path() + "/run";
  std::string path;
  {
    auto written = WriteJobStatusFile(dir, JobStatusFile{"job-1", "127.0.0.1:4000", "secret", ::getpid(), ""});
    ASSERT_TRUE(written.ok()) << written.status();
    path = *written;
    ScopedJobStatusFile scoped(path);
    struct stat info;
    ASSERT_EQ(::stat(dir.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0700u);
    ASSERT_EQ(::stat(path.c_str(), &info), 0);
    EXPECT_EQ(info.st_mode & 0777, 0600u);
    auto files = ReadJobStatusFiles(dir);
    ASSERT_TRUE(files.ok()) << files.status();
    ASSERT_EQ(files->size(), 1u);
    EXPECT_EQ((*files)[0].job_id, "job-1");
    EXPECT_EQ((*files)[0].address, "127.0.0.1:4000");
    EXPECT_EQ((*files)[0].token, "secret");
    EXPECT_EQ((*files)[0].pid, ::getpid());
  }
  EXPECT_NE(::access(path.c_str(), F_OK), 0);  // gone with its controller
  auto files = ReadJobStatusFiles(dir);
  ASSERT_TRUE(files.ok());
  EXPECT_TRUE(files->empty());
}

TEST(JobStatusFile, AFileWhoseControllerIsGoneIsStale) {
  TestTempDir temp;
  const std::string dir = temp.path() + "/run";
  // A child that has exited and been reaped: its pid names no process.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WriteJobStatusFile(dir, JobStatusFile{"gone", "127.0.0.1:1", "t", child, ""}).ok());
  ASSERT_TRUE(WriteJobStatusFile(dir, JobStatusFile{"alive", "127.0.0.1:2", "t", ::getpid(), ""}).ok());
  std::vector<std::string> stale;
  auto files = ReadJobStatusFiles(dir, &stale);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].job_id, "alive");
  ASSERT_EQ(stale.size(), 1u);
  EXPECT_THAT(stale[0], HasSubstr("gone.status"));
}

TEST(JobStatusFile, AFolderOthersCanReadAndABadJobIdAreRefused) {
  TestTempDir temp;
  const std::string dir = temp.path() + "/open";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  auto written = WriteJobStatusFile(dir, JobStatusFile{"job-1", "a:1", "t", ::getpid(), ""});
  ASSERT_FALSE(written.ok());
  EXPECT_THAT(std::string(written.status().message()), HasSubstr("mode 755"));
  EXPECT_FALSE(ReadJobStatusFiles(dir).ok());
  auto bad = WriteJobStatusFile(temp.path() + "/run", JobStatusFile{"../escape", "a:1", "t", ::getpid(), ""});
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("cannot name a status file"));
}

// Sets or unsets a variable for the test's span, and puts it back.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedVariable() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(JobStatusFile, ASecondControllerOfTheSameJobIdLeavesTheFirstOnesFile) {
  TestTempDir temp;
  const std::string dir = temp.path() + "/run";
  auto first = WriteJobStatusFile(dir, JobStatusFile{"job-1", "127.0.0.1:1", "first", ::getpid(), ""});
  ASSERT_TRUE(first.ok()) << first.status();
  ScopedJobStatusFile scoped(*first);
  // A live controller (this process's parent stands in) already has the id.
  auto second = WriteJobStatusFile(dir, JobStatusFile{"job-1", "127.0.0.1:2", "second", ::getppid(), ""});
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("job 'job-1' already runs on this machine"));
  auto files = ReadJobStatusFiles(dir);
  ASSERT_TRUE(files.ok());
  ASSERT_EQ(files->size(), 1u);
  EXPECT_EQ((*files)[0].token, "first");
  // A file of another process (the parent stands in) is not removed by a
  // scope of this one.
  auto other = WriteJobStatusFile(dir, JobStatusFile{"job-2", "127.0.0.1:4", "other", ::getppid(), ""});
  ASSERT_TRUE(other.ok()) << other.status();
  { ScopedJobStatusFile not_mine(*other); }
  EXPECT_EQ(::access(other->c_str(), F_OK), 0);
}

TEST(JobStatusFile, RunDirectoryFollowsTheVariables) {
  ScopedVariable run_dir(kRunDirVariable, nullptr);
  ScopedVariable runtime_dir("XDG_RUNTIME_DIR", nullptr);
  ::setenv(kRunDirVariable, "/x/run", 1);
  EXPECT_EQ(RunDirectory(), "/x/run");
  ::unsetenv(kRunDirVariable);
  ::setenv("XDG_RUNTIME_DIR", "/run/user/7", 1);
  EXPECT_EQ(RunDirectory(), "/run/user/7/dslaunch");
  ::unsetenv("XDG_RUNTIME_DIR");
  EXPECT_EQ(RunDirectory(), "/tmp/dslaunch-" + std::to_string(::geteuid()));
}

}  // namespace
}  // namespace dslaunch
