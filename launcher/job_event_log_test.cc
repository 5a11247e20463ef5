#include "launcher/job_event_log.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch {
namespace {

// A tiny reader for what FormatJobEvent writes: one flat JSON object whose
// values are strings, integers or booleans. Strict enough to catch a bad
// escape; values come back as their decoded text ("12", "true", "a\"b").
class FlatJsonReader {
 public:
  static std::optional<std::map<std::string, std::string>> Parse(const std::string& text) {
    FlatJsonReader reader(text);
    std::map<std::string, std::string> object;
    if (!reader.Eat('{')) return std::nullopt;
    if (reader.Eat('}')) return reader.AtEnd() ? std::optional(object) : std::nullopt;
    do {
      auto key = reader.String();
      if (!key || !reader.Eat(':')) return std::nullopt;
      std::optional<std::string> value = reader.Peek() == '"' ? reader.String() : reader.Bare();
      if (!value || object.count(*key)) return std::nullopt;
      object[*key] = *value;
    } while (reader.Eat(','));
    if (!reader.Eat('}') || !reader.AtEnd()) return std::nullopt;
    return object;
  }

 private:
  explicit FlatJsonReader(const std::string& text) : text_(text) {}
  void SkipSpace() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  char Peek() {
    SkipSpace();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool Eat(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  bool AtEnd() {
    SkipSpace();
    return pos_ == text_.size();
  }
  // A number or true/false.
  std::optional<std::string> Bare() {
    size_t start = pos_;
    while (pos_ < text_.size() && std::string("-0123456789truefals").find(text_[pos_]) != std::string::npos) {
      ++pos_;
    }
    std::string bare = text_.substr(start, pos_ - start);
    if (bare == "true" || bare == "false") return bare;
    if (bare.empty() || bare.find_first_not_of("-0123456789") != std::string::npos) return std::nullopt;
    return bare;
  }
  std::optional<std::string> String() {
    if (!Eat('"')) return std::nullopt;
    std::string out;
    while (pos_ < text_.size()) {
      unsigned char c = text_[pos_++];
      if (c == '"') return out;
      if (c < 0x20) return std::nullopt;  // raw control characters are not JSON
      if (c != '\\') {
        out += static_cast<char>(c);
        continue;
      }
      if (pos_ >= text_.size()) return std::nullopt;
      char escape = text_[pos_++];
      switch (escape) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          if (pos_ + 4 > text_.size()) return std::nullopt;
          unsigned code = std::stoul(text_.substr(pos_, 4), nullptr, 16);
          pos_ += 4;
          if (code < 0x80) {
            out += static_cast<char>(code);
          } else if (code == 0xFFFD) {
            out += "\xEF\xBF\xBD";
          } else {
            return std::nullopt;  // the writer only emits \u00XX and \ufffd
          }
          break;
        }
        default:
          return std::nullopt;
      }
    }
    return std::nullopt;  // unterminated
  }

  const std::string& text_;
  size_t pos_ = 0;
};

TEST(JsonQuote, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonQuote("plain"), "\"plain\"");
  EXPECT_EQ(JsonQuote("say \"hi\""), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(JsonQuote("C:\\dir"), "\"C:\\\\dir\"");
  EXPECT_EQ(JsonQuote("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(JsonQuote(std::string("nul\0x", 5)), "\"nul\\u0000x\"");
  EXPECT_EQ(JsonQuote("\x1b[31mred"), "\"\\u001b[31mred\"");
  EXPECT_EQ(JsonQuote(""), "\"\"");
}

TEST(JsonQuote, KeepsUtf8AndReplacesInvalidBytes) {
  EXPECT_EQ(JsonQuote("Grüße → 東京 🚀"), "\"Grüße → 東京 🚀\"");
  EXPECT_EQ(JsonQuote("bad \xff byte"), "\"bad \\ufffd byte\"");
  EXPECT_EQ(JsonQuote("cut \xe6\x9d"), "\"cut \\ufffd\\ufffd\"");        // truncated sequence
  EXPECT_EQ(JsonQuote("\xc0\xaf"), "\"\\ufffd\\ufffd\"");                // overlong '/'
  EXPECT_EQ(JsonQuote("\xed\xa0\x80"), "\"\\ufffd\\ufffd\\ufffd\"");     // a surrogate
}

TEST(FormatJobEvent, TimeAndEventComeFirstThenFieldsInOrder) {
  JobEvent event("state", 1718000000123456);
  event.Text("state", "JOB_RUNNING").Int("attempt", 0);
  EXPECT_EQ(FormatJobEvent(event),
            "{\"time_us\":1718000000123456, \"event\":\"state\", \"state\":\"JOB_RUNNING\", "
            "\"attempt\":0}");
}

TEST(FormatJobEvent, ReadsBackExactly) {
  const std::string nasty = "rank 3: \"quoted\" \\ back\nslash\ttab \x01 ünï";
  JobEvent event("rank_failed", 42);
  event.Int("rank", 3).Int("ended_us", -1).Bool("stopped", false).Bool("lost", true).Text("cause", nasty);
  auto parsed = FlatJsonReader::Parse(FormatJobEvent(event));
  ASSERT_TRUE(parsed.has_value()) << FormatJobEvent(event);
  EXPECT_EQ((*parsed)["time_us"], "42");
  EXPECT_EQ((*parsed)["event"], "rank_failed");
  EXPECT_EQ((*parsed)["rank"], "3");
  EXPECT_EQ((*parsed)["ended_us"], "-1");
  EXPECT_EQ((*parsed)["stopped"], "false");
  EXPECT_EQ((*parsed)["lost"], "true");
  EXPECT_EQ((*parsed)["cause"], nasty);
  EXPECT_EQ(FormatJobEvent(event).find('\n'), std::string::npos);
}

TEST(FlatJsonReader, RejectsWhatIsNotJson) {
  // The checker itself must fail on broken lines, or the tests above prove nothing.
  EXPECT_FALSE(FlatJsonReader::Parse("{\"a\":\"x\ny\"}"));
  EXPECT_FALSE(FlatJsonReader::Parse("{\"a\":\"x\\qy\"}"));
  EXPECT_FALSE(FlatJsonReader::Parse("{\"a\":\"x\"y\"}"));
  EXPECT_FALSE(FlatJsonReader::Parse("{\"a\":1"));
  EXPECT_TRUE(FlatJsonReader::Parse("{\"a\":1, \"b\":\"\\\"\"}"));
}

TEST(JobEvent, TypedGetters) {
  JobEvent event("restart_decision", 1);
  event.Int("backoff_ms", 2000).Bool("restart", true).Text("reason", "why");
  EXPECT_EQ(event.GetInt("backoff_ms"), 2000);
  EXPECT_EQ(event.GetBool("restart"), true);
  EXPECT_EQ(event.GetText("reason"), "why");
  EXPECT_FALSE(event.GetInt("reason").has_value());  // wrong type
  EXPECT_FALSE(event.GetText("missing").has_value());
}

TEST(FileJobEventLog, AppendsOneFlushedLinePerEvent) {
  char dir_template[] = "/tmp/job_event_log_test.XXXXXX";
  ASSERT_NE(::mkdtemp(dir_template), nullptr);
  const std::string path = std::string(dir_template) + "/events.jsonl";
  auto log = FileJobEventLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  (*log)->Append(JobEvent("job_start", 1).Text("job_id", "j\"1"));
  // Flushed at once: readable while the log is still open.
  {
    std::ifstream in(path);
    std::string line;
    ASSERT_TRUE(std::getline(in, line));
    EXPECT_EQ(line, "{\"time_us\":1, \"event\":\"job_start\", \"job_id\":\"j\\\"1\"}");
  }
  (*log)->Append(JobEvent("state", 2).Text("state", "JOB_RUNNING").Text("note", "two\nlines"));
  EXPECT_TRUE((*log)->status().ok());
  log->reset();
  // Reopening appends.
  auto again = FileJobEventLog::Open(path);
  ASSERT_TRUE(again.ok());
  (*again)->Append(JobEvent("job_start", 3));
  again->reset();

  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u);
  for (const std::string& line : lines) EXPECT_TRUE(FlatJsonReader::Parse(line)) << line;
  EXPECT_EQ((*FlatJsonReader::Parse(lines[1]))["note"], "two\nlines");
  std::remove(path.c_str());
  ::rmdir(dir_template);
}

TEST(FileJobEventLog, UnwritablePathIsAnError) {
  auto log = FileJobEventLog::Open("/nonexistent-dir-for-test/events.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_THAT(std::string(log.status().message()), ::testing::HasSubstr("/nonexistent-dir-for-test"));
}

}  // namespace
}  // namespace dslaunch
