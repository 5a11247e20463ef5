#include "launcher/controller_journal.h"

#include <sys/stat.h>

#include <fstream>

#include "common/test_temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

using ::testing::HasSubstr;

JournaledIdentity Identity() {
  JournaledIdentity identity;
  identity.argv = {"dslaunch", "--agents", "h1:7000", "--log_dir", "/logs", "train", "--name", "a\tb\nc"};
  identity.job_id = "job-7";
  identity.job_credential = "cred";
  identity.store_token = "store-token";
  identity.store_address = "10.0.0.1:4567";
  identity.working_dir = "/home/user/run";
  return identity;
}

TEST(ControllerJournalTest, ReadsBackWhatWasJournaled) {
  TestTempDir dir;
  const std::string path = dir.File(kControllerJournalFile);
  auto journal = ControllerJournal::Create(path);
  ASSERT_TRUE(journal.ok()) << journal.status();
  JournalJobStart(**journal, Identity());
  JournalingEventLog log(nullptr, journal->get());
  log.Append(JobEvent("attempt_start").Int("attempt", 0).Int("world_size", 4).Text("hosts", "h1,h2"));
  JournalStoreChange(**journal, {StoreChange::Kind::kAttemptToken, "", "tok0", 0});
  JournalStoreChange(**journal, {StoreChange::Kind::kPut, "0/nccl/world", "id\twith tab", 0});
  JournalStoreChange(**journal, {StoreChange::Kind::kDelete, "0/barrier", "", 0});
  log.Append(JobEvent("attempt_end").Int("attempt", 0).Text("end", "ATTEMPT_RANK_ERROR").Int("exit_code", 3)
                 .Text("cause", "rank 1 on h1 exited with code 3"));
  log.Append(JobEvent("checkpoint_committed").Int("attempt", 0).Text("tag", "global_step40"));
  JournalStoreChange(**journal, {StoreChange::Kind::kDropAttempt, "", "", 0});
  log.Append(JobEvent("attempt_start").Int("attempt", 1).Int("world_size", 2).Text("hosts", "h2"));
  log.Append(JobEvent("state").Text("state", "JOB_RUNNING"));  // not journaled
  ASSERT_TRUE((*journal)->status().ok());

  auto read = ReadControllerJournal(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->identity.argv, Identity().argv);
  EXPECT_EQ(read->identity.job_id, "job-7");
  EXPECT_EQ(read->identity.job_credential, "cred");
  EXPECT_EQ(read->identity.store_token, "store-token");
  EXPECT_EQ(read->identity.store_address, "10.0.0.1:4567");
  EXPECT_EQ(read->identity.working_dir, "/home/user/run");
  EXPECT_EQ(read->attempt, 1);
  EXPECT_EQ(read->world_size, 2);
  EXPECT_EQ(read->hosts, std::vector<std::string>{"h2"});
  ASSERT_EQ(read->ended.size(), 1u);
  EXPECT_EQ(read->ended[0].attempt, 0);
  EXPECT_EQ(read->ended[0].end, ATTEMPT_RANK_ERROR);
  EXPECT_EQ(read->ended[0].exit_code, 3);
  EXPECT_EQ(read->ended[0].cause, "rank 1 on h1 exited with code 3");
  EXPECT_EQ(read->committed_tag, "global_step40");
  ASSERT_EQ(read->store_changes.size(), 4u);
  EXPECT_EQ(read->store_changes[0].kind, StoreChange::Kind::kAttemptToken);
  EXPECT_EQ(read->store_changes[0].value, "tok0");
  EXPECT_EQ(read->store_changes[1].value, "id\twith tab");
  EXPECT_EQ(read->store_changes[2].kind, StoreChange::Kind::kDelete);
  EXPECT_EQ(read->store_changes[3].kind, StoreChange::Kind::kDropAttempt);
  EXPECT_FALSE(read->job_ended);

  log.Append(JobEvent("job_end"));
  EXPECT_TRUE(ReadControllerJournal(path)->job_ended);
}

TEST(ControllerJournalTest, OnlyItsOwnerCanReadIt) {
  TestTempDir dir;
  const std::string path = dir.Write(kControllerJournalFile, "old contents anyone could read\n");
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto journal = ControllerJournal::Create(path);
  ASSERT_TRUE(journal.ok()) << journal.status();
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  JournalJobStart(**journal, Identity());
  // Create replaced the old contents; Reopen appends.
  auto reopened = ControllerJournal::Reopen(path);
  ASSERT_TRUE(reopened.ok());
  JournalingEventLog log(nullptr, reopened->get());
  log.Append(JobEvent("attempt_start").Int("attempt", 2).Int("world_size", 8).Text("hosts", "h1"));
  auto read = ReadControllerJournal(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->attempt, 2);
}

TEST(ControllerJournalTest, ALastLineCutShortByTheCrashIsNotARecord) {
  TestTempDir dir;
  const std::string path = dir.File(kControllerJournalFile);
  {
    auto journal = ControllerJournal::Create(path);
    ASSERT_TRUE(journal.ok());
    JournalJobStart(**journal, Identity());
  }
  std::ofstream(path, std::ios::app) << "attempt\t5\t4\th1";  // no newline
  auto read = ReadControllerJournal(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->attempt, -1);
}

TEST(ControllerJournalTest, ABadRecordIsNamedByFileAndLine) {
  TestTempDir dir;
  const std::string path = dir.File(kControllerJournalFile);
  {
    auto journal = ControllerJournal::Create(path);
    ASSERT_TRUE(journal.ok());
    JournalJobStart(**journal, Identity());
    (*journal)->Append("attempt", {"one", "4", "h1"});
  }
  auto read = ReadControllerJournal(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr(path + ":2: 'one' is not a number of 0 or more"));
  const std::string headless = dir.Write("other.journal", "attempt\t1\t4\th1\n");
  EXPECT_THAT(ReadControllerJournal(headless).status().message(), HasSubstr(":1: the journal does not begin"));
  EXPECT_THAT(ReadControllerJournal(dir.File("missing")).status().message(), HasSubstr("cannot read"));
}

}  // namespace
}  // namespace dslaunch
