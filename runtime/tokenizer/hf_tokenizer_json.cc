#include "runtime/tokenizer/hf_tokenizer_json.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/bounded_file.h"
#include "common/status_macros.h"

namespace dslaunch::runtime {
namespace {

// GPT-2's pre-tokenizer pattern: what ByteLevel with use_regex splits on.
constexpr char kGpt2Pattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Reads one part of the file; every message names the file and the key path.
class SpecReader {
 public:
  explicit SpecReader(absl::string_view source) : source_(source) {}

  absl::Status Error(absl::string_view where, absl::string_view problem) const {
    return absl::InvalidArgumentError(absl::StrCat(source_, ": ", where, " ", problem));
  }

  absl::Status ExpectType(const JsonValue& value, JsonValue::Type type, absl::string_view where) const {
    if (value.type() == type) return absl::OkStatus();
    return Error(where, absl::StrCat("must be ", JsonValue::TypeName(type), ", not ",
                                     JsonValue::TypeName(value.type())));
  }

  // Every key of `object` must be one of `known`.
  absl::Status CheckKeys(const JsonValue& object, absl::string_view where,
                         std::initializer_list<absl::string_view> known) const {
    DS_RETURN_IF_ERROR(ExpectType(object, JsonValue::Type::kObject, where));
    for (const std::string& key : object.keys()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        return Error(Join(where, key), absl::StrCat("is not supported (", where.empty() ? "top-level" : where,
                                                    " keys understood: ", absl::StrJoin(known, ", "), ")"));
      }
    }
    return absl::OkStatus();
  }

  static std::string Join(absl::string_view where, absl::string_view key) {
    return where.empty() ? std::string(key) : absl::StrCat(where, ".", key);
  }

  // The "type" of a component object.
  absl::StatusOr<std::string> TypeOf(const JsonValue& object, absl::string_view where) const {
    DS_RETURN_IF_ERROR(ExpectType(object, JsonValue::Type::kObject, where));
    const JsonValue* type = object.Find("type");
    if (type == nullptr) return Error(Join(where, "type"), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*type, JsonValue::Type::kString, Join(where, "type")));
    return type->string_value();
  }

  absl::StatusOr<bool> Bool(const JsonValue& object, absl::string_view key, absl::string_view where,
                            bool if_missing) const {
    const JsonValue* value = object.Find(key);
    if (value == nullptr) return if_missing;
    DS_RETURN_IF_ERROR(ExpectType(*value, JsonValue::Type::kBool, Join(where, key)));
    return value->bool_value();
  }

  absl::StatusOr<std::string> String(const JsonValue& object, absl::string_view key, absl::string_view where) const {
    const JsonValue* value = object.Find(key);
    if (value == nullptr) return Error(Join(where, key), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*value, JsonValue::Type::kString, Join(where, key)));
    return value->string_value();
  }

  absl::StatusOr<int64_t> Int(const JsonValue& value, absl::string_view where, int64_t min, int64_t max) const {
    DS_RETURN_IF_ERROR(ExpectType(value, JsonValue::Type::kNumber, where));
    const double v = value.number_value();
    if (v != std::floor(v) || v < static_cast<double>(min) || v > static_cast<double>(max)) {
      return Error(where, absl::StrCat("must be an integer in [", min, ", ", max, "], not ", v));
    }
    return static_cast<int64_t>(v);
  }

  // A key that tokenizers accepts but whose only supported value here is
  // null (or absent).
  absl::Status MustBeNull(const JsonValue& object, absl::string_view key, absl::string_view where,
                          absl::string_view why) const {
    const JsonValue* value = object.Find(key);
    if (value == nullptr || value->is_null()) return absl::OkStatus();
    return Error(Join(where, key), absl::StrCat("must be null: ", why));
  }

  // {"String": "..."} (and, when allowed, {"Regex": "..."}): a Split or
  // Replace pattern, as a PCRE2 pattern.
  absl::StatusOr<std::string> Pattern(const JsonValue& object, absl::string_view where, bool regex_allowed) const {
    const JsonValue* pattern = object.Find("pattern");
    const std::string pattern_where = Join(where, "pattern");
    if (pattern == nullptr) return Error(pattern_where, "is missing");
    DS_RETURN_IF_ERROR(CheckKeys(*pattern, pattern_where, {"String", "Regex"}));
    if (pattern->keys().size() != 1) return Error(pattern_where, "must hold exactly one of String, Regex");
    const std::string& kind = pattern->keys()[0];
    const JsonValue& text = pattern->items()[0];
    DS_RETURN_IF_ERROR(ExpectType(text, JsonValue::Type::kString, Join(pattern_where, kind)));
    if (kind == "Regex") {
      if (!regex_allowed) return Error(Join(pattern_where, "Regex"), "is not supported here (a String pattern only)");
      return text.string_value();
    }
    if (!regex_allowed) return text.string_value();
    // A literal string as a regex: every ASCII punctuation escaped.
    std::string escaped;
    for (char c : text.string_value()) {
      if (std::ispunct(static_cast<unsigned char>(c)) || c == ' ') escaped.push_back('\\');
      escaped.push_back(c);
    }
    return escaped;
  }

  absl::StatusOr<std::shared_ptr<const UnicodeRegex>> Regex(const std::string& pattern, absl::string_view where) const {
    auto regex = UnicodeRegex::Compile(pattern);
    if (!regex.ok()) return Error(where, regex.status().message());
    return std::shared_ptr<const UnicodeRegex>(std::move(*regex));
  }

  absl::Status ReadAddedTokens(const JsonValue& root, HfTokenizerSpec* spec) const;
  absl::Status ReadNormalizer(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const;
  absl::Status ReadPreTokenizer(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const;
  absl::StatusOr<HfPreTokenizerStep::PrependScheme> ReadMetaspace(const JsonValue& value, const std::string& where,
                                                                  std::string* replacement, bool* split) const;
  absl::Status ReadModel(const JsonValue& value, HfTokenizerSpec* spec) const;
  absl::Status ReadPostProcessor(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const;
  absl::Status ReadTemplate(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const;
  absl::Status ReadDecoder(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const;

 private:
  const std::string source_;
};

absl::Status SpecReader::ReadAddedTokens(const JsonValue& root, HfTokenizerSpec* spec) const {
  const JsonValue* tokens = root.Find("added_tokens");
  if (tokens == nullptr || tokens->is_null()) return absl::OkStatus();
  DS_RETURN_IF_ERROR(ExpectType(*tokens, JsonValue::Type::kArray, "added_tokens"));
  const bool has_normalizer = root.Find("normalizer") != nullptr && !root.Find("normalizer")->is_null();
  for (size_t i = 0; i < tokens->items().size(); ++i) {
    const JsonValue& token = tokens->items()[i];
    const std::string where = absl::StrCat("added_tokens[", i, "]");
    DS_RETURN_IF_ERROR(CheckKeys(token, where, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}));
    HfAddedToken added;
    const JsonValue* id = token.Find("id");
    if (id == nullptr) return Error(Join(where, "id"), "is missing");
    DS_ASSIGN_OR_RETURN(int64_t id_value, Int(*id, Join(where, "id"), 0, kMaxHfTokenId));
    added.id = static_cast<int32_t>(id_value);
    DS_ASSIGN_OR_RETURN(added.content, String(token, "content", where));
    if (added.content.empty()) return Error(Join(where, "content"), "is empty");
    DS_ASSIGN_OR_RETURN(added.special, Bool(token, "special", where, false));
    for (absl::string_view flag : {"single_word", "lstrip", "rstrip"}) {
      DS_ASSIGN_OR_RETURN(bool set, Bool(token, flag, where, false));
      if (set) return Error(Join(where, flag), "true is not supported (the token is matched exactly as written)");
    }
    // Note: tokenizers matches a normalized token in the normalized text;
    // with no normalizer that is the text itself.
    DS_ASSIGN_OR_RETURN(bool normalized, Bool(token, "normalized", where, !added.special));
    if (normalized && has_normalizer) {
      return Error(Join(where, "normalized"), "true is not supported with a normalizer (matched in the raw text only)");
    }
    spec->added_tokens.push_back(std::move(added));
  }
  return absl::OkStatus();
}

absl::Status SpecReader::ReadNormalizer(const JsonValue& value, const std::string& where,
                                        HfTokenizerSpec* spec) const {
  if (value.is_null()) return absl::OkStatus();
  DS_ASSIGN_OR_RETURN(std::string type, TypeOf(value, where));
  if (type == "Sequence") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "normalizers"}));
    const JsonValue* steps = value.Find("normalizers");
    if (steps == nullptr) return Error(Join(where, "normalizers"), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*steps, JsonValue::Type::kArray, Join(where, "normalizers")));
    for (size_t i = 0; i < steps->items().size(); ++i) {
      DS_RETURN_IF_ERROR(ReadNormalizer(steps->items()[i], absl::StrCat(where, ".normalizers[", i, "]"), spec));
    }
    return absl::OkStatus();
  }
  HfNormalizerStep step;
  if (type == "Prepend") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "prepend"}));
    step.kind = HfNormalizerStep::Kind::kPrepend;
    DS_ASSIGN_OR_RETURN(step.content, String(value, "prepend", where));
  } else if (type == "Replace") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "pattern", "content"}));
    step.kind = HfNormalizerStep::Kind::kReplace;
    DS_ASSIGN_OR_RETURN(step.pattern, Pattern(value, where, /*regex_allowed=*/false));
    if (step.pattern.empty()) return Error(Join(where, "pattern"), "is empty");
    DS_ASSIGN_OR_RETURN(step.content, String(value, "content", where));
  } else {
    return Error(Join(where, "type"), absl::StrCat("\"", type, "\" is not supported (Prepend, Replace, Sequence)"));
  }
  spec->normalizer.push_back(std::move(step));
  return absl::OkStatus();
}

absl::StatusOr<HfPreTokenizerStep::PrependScheme> SpecReader::ReadMetaspace(const JsonValue& value,
                                                                            const std::string& where,
                                                                            std::string* replacement,
                                                                            bool* split) const {
  DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "replacement", "prepend_scheme", "add_prefix_space", "split", "str_rep"}));
  DS_ASSIGN_OR_RETURN(*replacement, String(value, "replacement", where));
  if (const JsonValue* str_rep = value.Find("str_rep"); str_rep != nullptr) {
    if (!str_rep->is_string() || str_rep->string_value() != *replacement) {
      return Error(Join(where, "str_rep"), "must equal replacement");
    }
  }
  // Files older than prepend_scheme had add_prefix_space, and always split.
  DS_ASSIGN_OR_RETURN(*split, Bool(value, "split", where, true));
  using Scheme = HfPreTokenizerStep::PrependScheme;
  if (value.Find("prepend_scheme") != nullptr) {
    DS_ASSIGN_OR_RETURN(std::string scheme, String(value, "prepend_scheme", where));
    if (scheme == "always") return Scheme::kAlways;
    if (scheme == "first") return Scheme::kFirst;
    if (scheme == "never") return Scheme::kNever;
    return Error(Join(where, "prepend_scheme"), absl::StrCat("\"", scheme, "\" is not one of always, first, never"));
  }
  DS_ASSIGN_OR_RETURN(bool add_prefix_space, Bool(value, "add_prefix_space", where, true));
  return add_prefix_space ? Scheme::kAlways : Scheme::kNever;
}

absl::Status SpecReader::ReadPreTokenizer(const JsonValue& value, const std::string& where,
                                          HfTokenizerSpec* spec) const {
  if (value.is_null()) return absl::OkStatus();
  DS_ASSIGN_OR_RETURN(std::string type, TypeOf(value, where));
  HfPreTokenizerStep step;
  if (type == "Sequence") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "pretokenizers"}));
    const JsonValue* steps = value.Find("pretokenizers");
    if (steps == nullptr) return Error(Join(where, "pretokenizers"), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*steps, JsonValue::Type::kArray, Join(where, "pretokenizers")));
    for (size_t i = 0; i < steps->items().size(); ++i) {
      DS_RETURN_IF_ERROR(ReadPreTokenizer(steps->items()[i], absl::StrCat(where, ".pretokenizers[", i, "]"), spec));
    }
    return absl::OkStatus();
  } else if (type == "Split") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "pattern", "behavior", "invert"}));
    step.kind = HfPreTokenizerStep::Kind::kSplit;
    DS_ASSIGN_OR_RETURN(std::string pattern, Pattern(value, where, /*regex_allowed=*/true));
    DS_ASSIGN_OR_RETURN(step.regex, Regex(pattern, Join(where, "pattern")));
    DS_ASSIGN_OR_RETURN(std::string behavior, String(value, "behavior", where));
    if (behavior != "Isolated") {
      return Error(Join(where, "behavior"), absl::StrCat("\"", behavior, "\" is not supported (Isolated only)"));
    }
    DS_ASSIGN_OR_RETURN(bool invert, Bool(value, "invert", where, false));
    if (invert) return Error(Join(where, "invert"), "true is not supported");
  } else if (type == "ByteLevel") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    step.kind = HfPreTokenizerStep::Kind::kByteLevel;
    DS_ASSIGN_OR_RETURN(step.add_prefix_space, Bool(value, "add_prefix_space", where, true));
    DS_ASSIGN_OR_RETURN(bool use_regex, Bool(value, "use_regex", where, true));
    // trim_offsets changes offsets only, which dslaunch does not report.
    DS_RETURN_IF_ERROR(Bool(value, "trim_offsets", where, true).status());
    if (use_regex) {
      DS_ASSIGN_OR_RETURN(step.regex, Regex(kGpt2Pattern, Join(where, "use_regex")));
    }
  } else if (type == "Metaspace") {
    step.kind = HfPreTokenizerStep::Kind::kMetaspace;
    DS_ASSIGN_OR_RETURN(step.prepend_scheme, ReadMetaspace(value, where, &step.replacement, &step.split));
  } else {
    return Error(Join(where, "type"),
                 absl::StrCat("\"", type, "\" is not supported (Split, ByteLevel, Metaspace, Sequence)"));
  }
  spec->pre_tokenizer.push_back(std::move(step));
  return absl::OkStatus();
}

absl::Status SpecReader::ReadModel(const JsonValue& model, HfTokenizerSpec* spec) const {
  const std::string where = "model";
  DS_ASSIGN_OR_RETURN(std::string type, TypeOf(model, where));
  if (type != "BPE") return Error("model.type", absl::StrCat("\"", type, "\" is not supported (BPE only)"));
  DS_RETURN_IF_ERROR(CheckKeys(model, where, {"type", "dropout", "unk_token", "continuing_subword_prefix",
                                              "end_of_word_suffix", "fuse_unk", "byte_fallback", "ignore_merges",
                                              "vocab", "merges"}));
  DS_RETURN_IF_ERROR(MustBeNull(model, "dropout", where, "BPE dropout is for training, encoding here is exact"));
  for (absl::string_view affix : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const JsonValue* value = model.Find(affix);
    if (value != nullptr && !value->is_null() && !(value->is_string() && value->string_value().empty())) {
      return Error(Join(where, affix), "must be null (subword prefixes and suffixes are not supported)");
    }
  }
  BpeOptions options;
  DS_ASSIGN_OR_RETURN(options.fuse_unk, Bool(model, "fuse_unk", where, false));
  DS_ASSIGN_OR_RETURN(options.byte_fallback, Bool(model, "byte_fallback", where, false));
  DS_ASSIGN_OR_RETURN(options.ignore_merges, Bool(model, "ignore_merges", where, false));

  const JsonValue* vocab_json = model.Find("vocab");
  if (vocab_json == nullptr) return Error("model.vocab", "is missing");
  DS_RETURN_IF_ERROR(ExpectType(*vocab_json, JsonValue::Type::kObject, "model.vocab"));
  absl::flat_hash_map<std::string, int32_t> vocab;
  vocab.reserve(vocab_json->keys().size());
  for (size_t i = 0; i < vocab_json->keys().size(); ++i) {
    const std::string& token = vocab_json->keys()[i];
    DS_ASSIGN_OR_RETURN(int64_t id, Int(vocab_json->items()[i], absl::StrCat("model.vocab[\"", token, "\"]"), 0,
                                        kMaxHfTokenId));
    vocab.emplace(token, static_cast<int32_t>(id));
    spec->vocab_size = std::max(spec->vocab_size, static_cast<int>(id) + 1);
  }

  if (const JsonValue* unk = model.Find("unk_token"); unk != nullptr && !unk->is_null()) {
    DS_RETURN_IF_ERROR(ExpectType(*unk, JsonValue::Type::kString, "model.unk_token"));
    auto it = vocab.find(unk->string_value());
    if (it == vocab.end()) {
      return Error("model.unk_token", absl::StrCat("\"", unk->string_value(), "\" is not in model.vocab"));
    }
    options.unk_id = it->second;
  }

  const JsonValue* merges_json = model.Find("merges");
  if (merges_json == nullptr) return Error("model.merges", "is missing");
  DS_RETURN_IF_ERROR(ExpectType(*merges_json, JsonValue::Type::kArray, "model.merges"));
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merges_json->items().size());
  for (size_t i = 0; i < merges_json->items().size(); ++i) {
    const JsonValue& merge = merges_json->items()[i];
    const std::string merge_where = absl::StrCat("model.merges[", i, "]");
    if (merge.is_string()) {
      // The older form: "left right", exactly one space.
      const std::string& text = merge.string_value();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return Error(merge_where, absl::StrCat("\"", text, "\" is not two tokens separated by one space"));
      }
      merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.items().size() == 2 && merge.items()[0].is_string() &&
               merge.items()[1].is_string()) {
      merges.emplace_back(merge.items()[0].string_value(), merge.items()[1].string_value());
    } else {
      return Error(merge_where, "must be \"left right\" or [\"left\", \"right\"]");
    }
  }
  auto bpe = BpeModel::Create(std::move(vocab), merges, options);
  if (!bpe.ok()) return Error("model", bpe.status().message());
  spec->model = std::move(*bpe);
  return absl::OkStatus();
}

absl::Status SpecReader::ReadTemplate(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const {
  // "pair" shapes two-sequence inputs, which dslaunch never encodes.
  DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "single", "pair", "special_tokens"}));
  const JsonValue* single = value.Find("single");
  if (single == nullptr) return Error(Join(where, "single"), "is missing");
  DS_RETURN_IF_ERROR(ExpectType(*single, JsonValue::Type::kArray, Join(where, "single")));
  const JsonValue* specials = value.Find("special_tokens");
  bool seen_sequence = false;
  for (size_t i = 0; i < single->items().size(); ++i) {
    const JsonValue& piece = single->items()[i];
    const std::string piece_where = absl::StrCat(where, ".single[", i, "]");
    DS_RETURN_IF_ERROR(CheckKeys(piece, piece_where, {"SpecialToken", "Sequence"}));
    if (piece.keys().size() != 1) return Error(piece_where, "must hold exactly one of SpecialToken, Sequence");
    const JsonValue& body = piece.items()[0];
    const std::string body_where = Join(piece_where, piece.keys()[0]);
    DS_RETURN_IF_ERROR(CheckKeys(body, body_where, {"id", "type_id"}));
    DS_ASSIGN_OR_RETURN(std::string id, String(body, "id", body_where));
    if (piece.keys()[0] == "Sequence") {
      if (id != "A" || seen_sequence) return Error(Join(body_where, "id"), "must be A, once");
      seen_sequence = true;
      continue;
    }
    std::optional<int32_t>& slot = seen_sequence ? spec->template_eos : spec->template_bos;
    if (slot.has_value()) {
      return Error(piece_where, "is a second special token on the same side of the sequence (one bos, one eos supported)");
    }
    const JsonValue* entry = specials == nullptr ? nullptr : specials->Find(id);
    const std::string entry_where = absl::StrCat(where, ".special_tokens[\"", id, "\"]");
    if (entry == nullptr) return Error(entry_where, "is missing");
    DS_RETURN_IF_ERROR(CheckKeys(*entry, entry_where, {"id", "ids", "tokens"}));
    const JsonValue* ids = entry->Find("ids");
    if (ids == nullptr || !ids->is_array() || ids->items().size() != 1) {
      return Error(Join(entry_where, "ids"), "must be an array of one id");
    }
    DS_ASSIGN_OR_RETURN(int64_t token_id, Int(ids->items()[0], Join(entry_where, "ids"), 0, INT32_MAX - 1));
    slot = static_cast<int32_t>(token_id);
  }
  if (!seen_sequence) return Error(Join(where, "single"), "has no Sequence A");
  return absl::OkStatus();
}

absl::Status SpecReader::ReadPostProcessor(const JsonValue& value, const std::string& where,
                                           HfTokenizerSpec* spec) const {
  if (value.is_null()) return absl::OkStatus();
  DS_ASSIGN_OR_RETURN(std::string type, TypeOf(value, where));
  if (type == "Sequence") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "processors"}));
    const JsonValue* steps = value.Find("processors");
    if (steps == nullptr) return Error(Join(where, "processors"), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*steps, JsonValue::Type::kArray, Join(where, "processors")));
    for (size_t i = 0; i < steps->items().size(); ++i) {
      DS_RETURN_IF_ERROR(ReadPostProcessor(steps->items()[i], absl::StrCat(where, ".processors[", i, "]"), spec));
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    // As a post-processor ByteLevel only trims offsets: the ids are untouched.
    return CheckKeys(value, where, {"type", "add_prefix_space", "trim_offsets", "use_regex"});
  }
  if (type == "TemplateProcessing") return ReadTemplate(value, where, spec);
  return Error(Join(where, "type"),
               absl::StrCat("\"", type, "\" is not supported (TemplateProcessing, ByteLevel, Sequence)"));
}

absl::Status SpecReader::ReadDecoder(const JsonValue& value, const std::string& where, HfTokenizerSpec* spec) const {
  if (value.is_null()) return absl::OkStatus();
  DS_ASSIGN_OR_RETURN(std::string type, TypeOf(value, where));
  HfDecoderStep step;
  using Kind = HfDecoderStep::Kind;
  if (type == "Sequence") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "decoders"}));
    const JsonValue* steps = value.Find("decoders");
    if (steps == nullptr) return Error(Join(where, "decoders"), "is missing");
    DS_RETURN_IF_ERROR(ExpectType(*steps, JsonValue::Type::kArray, Join(where, "decoders")));
    for (size_t i = 0; i < steps->items().size(); ++i) {
      DS_RETURN_IF_ERROR(ReadDecoder(steps->items()[i], absl::StrCat(where, ".decoders[", i, "]"), spec));
    }
    return absl::OkStatus();
  } else if (type == "ByteLevel") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "add_prefix_space", "trim_offsets", "use_regex"}));
    step.kind = Kind::kByteLevel;
  } else if (type == "Replace") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "pattern", "content"}));
    step.kind = Kind::kReplace;
    DS_ASSIGN_OR_RETURN(step.pattern, Pattern(value, where, /*regex_allowed=*/false));
    if (step.pattern.empty()) return Error(Join(where, "pattern"), "is empty");
    DS_ASSIGN_OR_RETURN(step.content, String(value, "content", where));
  } else if (type == "ByteFallback" || type == "Fuse") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type"}));
    step.kind = type == "Fuse" ? Kind::kFuse : Kind::kByteFallback;
  } else if (type == "Strip") {
    DS_RETURN_IF_ERROR(CheckKeys(value, where, {"type", "content", "start", "stop"}));
    step.kind = Kind::kStrip;
    DS_ASSIGN_OR_RETURN(step.content, String(value, "content", where));
    for (auto [key, target] : {std::pair{"start", &step.start}, std::pair{"stop", &step.stop}}) {
      const JsonValue* count = value.Find(key);
      if (count == nullptr) return Error(Join(where, key), "is missing");
      DS_ASSIGN_OR_RETURN(int64_t n, Int(*count, Join(where, key), 0, 1 << 20));
      *target = static_cast<int>(n);
    }
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    bool split = false;
    DS_ASSIGN_OR_RETURN(step.prepend_scheme, ReadMetaspace(value, where, &step.content, &split));
  } else {
    return Error(Join(where, "type"),
                 absl::StrCat("\"", type, "\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, "
                                          "Metaspace, Sequence)"));
  }
  spec->decoder.push_back(std::move(step));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<HfTokenizerSpec> HfTokenizerSpecFromJson(const JsonValue& root, absl::string_view source) {
  SpecReader reader(source);
  DS_RETURN_IF_ERROR(reader.CheckKeys(root, "", {"version", "truncation", "padding", "added_tokens", "normalizer",
                                                 "pre_tokenizer", "model", "post_processor", "decoder"}));
  DS_RETURN_IF_ERROR(reader.MustBeNull(root, "truncation", "", "dslaunch's tools cut sequences themselves"));
  DS_RETURN_IF_ERROR(reader.MustBeNull(root, "padding", "", "dslaunch's tools pad sequences themselves"));
  HfTokenizerSpec spec;
  const JsonValue kNull;
  auto member = [&](absl::string_view key) -> const JsonValue& {
    const JsonValue* value = root.Find(key);
    return value == nullptr ? kNull : *value;
  };
  if (root.Find("model") == nullptr) return reader.Error("model", "is missing");
  DS_RETURN_IF_ERROR(reader.ReadModel(member("model"), &spec));
  DS_RETURN_IF_ERROR(reader.ReadAddedTokens(root, &spec));
  DS_RETURN_IF_ERROR(reader.ReadNormalizer(member("normalizer"), "normalizer", &spec));
  DS_RETURN_IF_ERROR(reader.ReadPreTokenizer(member("pre_tokenizer"), "pre_tokenizer", &spec));
  DS_RETURN_IF_ERROR(reader.ReadPostProcessor(member("post_processor"), "post_processor", &spec));
  DS_RETURN_IF_ERROR(reader.ReadDecoder(member("decoder"), "decoder", &spec));
  for (const HfAddedToken& token : spec.added_tokens) spec.vocab_size = std::max(spec.vocab_size, token.id + 1);
  for (std::optional<int32_t> id : {spec.template_bos, spec.template_eos}) {
    if (id.has_value() && *id >= spec.vocab_size) {
      return reader.Error("post_processor", absl::StrCat("names id ", *id, ", past the vocabulary (", spec.vocab_size, ")"));
    }
  }
  return spec;
}

absl::StatusOr<HfTokenizerSpec> ReadHfTokenizerJson(const std::string& path) {
  DS_ASSIGN_OR_RETURN(std::string text, ReadConfigFile(path, "tokenizer.json", kMaxTokenizerJsonBytes));
  DS_ASSIGN_OR_RETURN(JsonValue root, ParseJson(text, path));
  return HfTokenizerSpecFromJson(root, path);
}

}  // namespace dslaunch::runtime
