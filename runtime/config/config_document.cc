#include "runtime/config/config_document.h"

#include <optional>
#include <sstream>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "yaml-cpp/eventhandler.h"

namespace dslaunch::runtime {
namespace {

// Where a problem is: 1-based, as editors number lines and columns.
struct TextPosition {
  int line = 1;
  int column = 1;
};

// Walks JSON text as yaml-cpp would read it, outside strings and comments.
// Returns the position of the first comma that only whitespace or comments
// separate from a closing '}' or ']', and that closer.
std::optional<std::pair<TextPosition, char>> FindTrailingComma(const std::string& text) {
  TextPosition at;
  size_t i = 0;
  auto advance = [&]() {
    if (text[i] == '\n') {
      ++at.line;
      at.column = 1;
    } else {
      ++at.column;
    }
    ++i;
  };
  // A YAML comment starts with '#' at a line start or after a blank.
  auto at_comment = [&]() {
    return text[i] == '#' && (i == 0 || absl::ascii_isspace(static_cast<unsigned char>(text[i - 1])));
  };
  auto skip_comment = [&]() {
    while (i < text.size() && text[i] != '\n') advance();
  };
  while (i < text.size()) {
    const char c = text[i];
    if (c == '"') {
      advance();
      while (i < text.size() && text[i] != '"') {
        if (text[i] == '\\' && i + 1 < text.size()) advance();
        advance();
      }
      if (i < text.size()) advance();
    } else if (c == '\'') {  // YAML's single-quoted string; '' is a quote inside it
      advance();
      while (i < text.size()) {
        if (text[i] == '\'' && (i + 1 >= text.size() || text[i + 1] != '\'')) break;
        if (text[i] == '\'') advance();
        advance();
      }
      if (i < text.size()) advance();
    } else if (at_comment()) {
      skip_comment();
    } else if (c == ',') {
      const TextPosition comma = at;
      advance();
      while (i < text.size()) {
        if (absl::ascii_isspace(static_cast<unsigned char>(text[i]))) {
          advance();
        } else if (at_comment()) {
          skip_comment();
        } else {
          break;
        }
      }
      if (i < text.size() && (text[i] == '}' || text[i] == ']')) {
        return std::make_pair(comma, text[i]);
      }
    } else {
      advance();
    }
  }
  return std::nullopt;
}

// Thrown out of the event parse at the first collection too deep.
struct TooDeep {
  YAML::Mark mark;
};

// Counts documents and nesting; builds nothing.
class ShapeChecker : public YAML::EventHandler {
 public:
  int documents() const { return documents_; }
  const YAML::Mark& last_document_mark() const { return last_document_; }

  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents_;
    last_document_ = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnSequenceEnd() override { --depth_; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Enter(mark);
  }
  void OnMapEnd() override { --depth_; }

 private:
  void Enter(const YAML::Mark& mark) {
    if (++depth_ > kMaxConfigNestingDepth) throw TooDeep{mark};
  }

  int documents_ = 0;
  int depth_ = 0;
  YAML::Mark last_document_ = YAML::Mark::null_mark();
};

std::string At(const std::string& origin, const YAML::Mark& mark) {
  return absl::StrCat(origin, ":", mark.line + 1, ":", mark.column + 1);
}

absl::Status NotYaml(const std::string& origin, const YAML::Exception& e) {
  return absl::InvalidArgumentError(
      absl::StrCat(At(origin, e.mark), ": not valid YAML or JSON: ", e.msg));
}

}  // namespace

ConfigSyntax ConfigSyntaxOf(const std::string& path) {
  return absl::EndsWithIgnoreCase(path, ".json") ? ConfigSyntax::kJson : ConfigSyntax::kYaml;
}

absl::StatusOr<YAML::Node> ParseConfigDocument(const std::string& text, const std::string& origin,
                                               ConfigSyntax syntax) {
  // Note [One config document].
  if (syntax == ConfigSyntax::kJson) {
    if (auto comma = FindTrailingComma(text)) {
      return absl::InvalidArgumentError(absl::StrCat(
          origin, ":", comma->first.line, ":", comma->first.column, ": trailing comma before '",
          std::string(1, comma->second), "' (JSON allows none)"));
    }
  }
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  ShapeChecker shape;
  try {
    while (parser.HandleNextDocument(shape)) {
      if (shape.documents() > 1) {
        return absl::InvalidArgumentError(absl::StrCat(
            origin, ":", shape.last_document_mark().line + 1,
            ": a second YAML document starts here; a config holds exactly one (remove the '---')"));
      }
    }
  } catch (const TooDeep& deep) {
    return absl::InvalidArgumentError(absl::StrCat(At(origin, deep.mark), ": nested more than ",
                                                   kMaxConfigNestingDepth,
                                                   " levels deep, the most a config may nest"));
  } catch (const YAML::Exception& e) {
    return NotYaml(origin, e);
  }
  try {
    return YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return NotYaml(origin, e);
  }
}

}  // namespace dslaunch::runtime
