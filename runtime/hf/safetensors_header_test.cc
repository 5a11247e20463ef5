#include "runtime/hf/safetensors_header.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace dslaunch::runtime {
namespace {

using ::testing::HasSubstr;

// A file of `json` as header and `data_bytes` zero bytes of data.
std::string File(const std::string& json, size_t data_bytes) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((json.size() >> (8 * i)) & 0xff);
  return out + json + std::string(data_bytes, '\0');
}

absl::StatusOr<SafetensorsHeader> Parse(const std::string& file) {
  return ParseSafetensorsHeader(reinterpret_cast<const uint8_t*>(file.data()), static_cast<int64_t>(file.size()),
                                static_cast<int64_t>(file.size()), "/m/x.safetensors");
}

TEST(SafetensorsHeaderTest, BuildsWhatItParses) {
  std::vector<SafetensorsEntryInfo> entries(3);
  entries[0].name = "b";
  entries[0].dtype = SafetensorsDtype::kBF16;
  entries[0].shape = {3, 5};
  entries[1].name = "a \"quoted\"";
  entries[1].dtype = SafetensorsDtype::kF32;
  entries[1].shape = {7};
  entries[2].name = "empty";
  entries[2].dtype = SafetensorsDtype::kF16;
  entries[2].shape = {0, 4};
  const std::string header = BuildSafetensorsHeader(entries, {{"format", "pt"}});
  EXPECT_EQ(header.size() % 8, 0u) << "data starts aligned";
  auto parsed = Parse(header + std::string(30 + 28, '\0'));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ASSERT_EQ(parsed->entries.size(), 3u);
  EXPECT_EQ(parsed->data_start, static_cast<int64_t>(header.size()));
  EXPECT_EQ(parsed->metadata.at("format"), "pt");
  EXPECT_EQ(parsed->entries[0].name, "b");  // in data order
  EXPECT_EQ(parsed->entries[2].name, "empty");
  for (const SafetensorsEntryInfo& e : parsed->entries) {
    if (e.name == "b") {
      EXPECT_EQ(e.begin, 0);
      EXPECT_EQ(e.end, 30);
      EXPECT_EQ(e.shape, (std::vector<int64_t>{3, 5}));
      EXPECT_EQ(e.dtype, SafetensorsDtype::kBF16);
    }
    if (e.name == "a \"quoted\"") EXPECT_EQ(e.end - e.begin, 28);
  }
}

TEST(SafetensorsHeaderTest, AHeaderThatLiesIsNamedWithItsTensor) {
  struct Case {
    std::string file, message;
  };
  const std::vector<Case> cases = {
      {std::string(5, '\0'), "truncated: 5 bytes"},
      {File("{}", 0).substr(0, 8) + "{", "truncated: the header claims 2 bytes but the file has 1"},
      {std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "the header claims"},
      {File("{\"w\": [1]}", 0), "tensor 'w': expected {dtype, shape, data_offsets}"},
      {File(R"({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}})", 12), "tensor 'w': 12 bytes for shape [2, 2] of F32 (16 expected)"},
      {File(R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8), "tensor 'w': data_offsets end at byte 16 but the file has 8 bytes of data (truncated?)"},
      {File(R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}})", 8), "tensor 'w': data_offsets [8, 0] are not a range"},
      {File(R"({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", 8), "tensor 'w': negative dimension"},
      {File(R"({"u": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12), "tensors 'u' and 'v' overlap"},
      {File("{\"w\": ", 0), "the header is not valid JSON"},
  };
  for (const Case& c : cases) {
    auto parsed = Parse(c.file);
    ASSERT_FALSE(parsed.ok()) << c.message;
    EXPECT_TRUE(absl::IsDataLoss(parsed.status())) << parsed.status();
    EXPECT_THAT(parsed.status().message(), HasSubstr("/m/x.safetensors: ")) << c.message;
    EXPECT_THAT(parsed.status().message(), HasSubstr(c.message));
  }
}

}  // namespace
}  // namespace dslaunch::runtime
