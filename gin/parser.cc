#include "gin/parser.h"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/status_macros.h"

namespace trainyard {
namespace {

struct Token {
  enum class Kind { kName, kNumber, kString, kOp, kNewline, kEnd };
  Kind kind = Kind::kEnd;
  std::string text;  // kString: the decoded text
  int line = 0;
  int column = 0;      // 0-based
  int end_column = 0;  // one past the last character on `line`
  bool starts_line = false;
};

// Python's tokenizer, reduced to what gin reads: names, numbers, strings,
// one-character operators, and a newline token where a statement may end
// (never inside brackets).
class Lexer {
 public:
  Lexer(absl::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    std::vector<Token> out;
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == ' ' || c == '\t' || c == '\f' || c == '\r') {
        ++pos_;
      } else if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == '\\' && pos_ + 1 < text_.size() && text_[pos_ + 1] == '\n') {
        pos_ += 2;
        NextLine(/*logical=*/false);
      } else if (c == '\n') {
        if (depth_ == 0 && !out.empty() && out.back().kind != Token::Kind::kNewline) {
          out.push_back(Make(Token::Kind::kNewline, "", pos_));
        }
        ++pos_;
        NextLine(/*logical=*/depth_ == 0);
      } else {
        TY_ASSIGN_OR_RETURN(Token token, Next());
        out.push_back(std::move(token));
      }
    }
    if (depth_ > 0) return Error(open_lines_.back(), "a bracket is not closed by the end of the file");
    if (!out.empty() && out.back().kind != Token::Kind::kNewline) out.push_back(Make(Token::Kind::kNewline, "", pos_));
    out.push_back(Make(Token::Kind::kEnd, "", pos_));
    return out;
  }

 private:
  absl::Status Error(int line, absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ":", line, ": ", what));
  }

  void NextLine(bool logical) {
    ++line_;
    line_start_ = pos_;
    if (logical) at_line_start_ = true;
  }

  Token Make(Token::Kind kind, std::string text, size_t begin) {
    Token t;
    t.kind = kind;
    t.text = std::move(text);
    t.line = line_;
    t.column = static_cast<int>(begin - line_start_);
    t.end_column = static_cast<int>(pos_ - line_start_);
    t.starts_line = at_line_start_ && kind != Token::Kind::kNewline;
    if (kind != Token::Kind::kNewline) at_line_start_ = false;
    return t;
  }

  absl::StatusOr<Token> Next() {
    const size_t begin = pos_;
    const char c = text_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t end = pos_;
      while (end < text_.size() && (std::isalnum(static_cast<unsigned char>(text_[end])) || text_[end] == '_')) ++end;
      // A string prefix (r, b, u, rb, ...) directly before a quote.
      if (end < text_.size() && (text_[end] == '\'' || text_[end] == '"') && end - pos_ <= 2 &&
          absl::AsciiStrToLower(text_.substr(pos_, end - pos_)).find_first_not_of("rbu") == std::string::npos) {
        const bool raw = absl::AsciiStrToLower(text_.substr(pos_, end - pos_)).find('r') != std::string::npos;
        pos_ = end;
        return String(begin, raw);
      }
      pos_ = end;
      return Make(Token::Kind::kName, std::string(text_.substr(begin, end - begin)), begin);
    }
    if (std::isdigit(static_cast<unsigned char>(c)) ||
        (c == '.' && pos_ + 1 < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_ + 1])))) {
      while (pos_ < text_.size()) {
        const char d = text_[pos_];
        const bool sign = (d == '-' || d == '+') && (text_[pos_ - 1] == 'e' || text_[pos_ - 1] == 'E') &&
                          text_.substr(begin, 2) != "0x" && text_.substr(begin, 2) != "0X";
        if (!std::isalnum(static_cast<unsigned char>(d)) && d != '_' && d != '.' && !sign) break;
        ++pos_;
      }
      return Make(Token::Kind::kNumber, std::string(text_.substr(begin, pos_ - begin)), begin);
    }
    if (c == '\'' || c == '"') return String(begin, /*raw=*/false);
    static constexpr absl::string_view kOps = "=:@%/.,()[]{}-";
    if (kOps.find(c) == absl::string_view::npos) {
      return Error(line_, absl::StrCat("unexpected character '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      ++depth_;
      open_lines_.push_back(line_);
    }
    if (c == ')' || c == ']' || c == '}') {
      if (--depth_ < 0) return Error(line_, absl::StrCat("'", std::string(1, c), "' closes no bracket"));
      open_lines_.pop_back();
    }
    ++pos_;
    return Make(Token::Kind::kOp, std::string(1, c), begin);
  }

  // A string literal from its opening quote at pos_ (prefix already read).
  absl::StatusOr<Token> String(size_t begin, bool raw) {
    const int start_line = line_;
    const char quote = text_[pos_];
    const bool triple = text_.substr(pos_, 3) == std::string(3, quote);
    pos_ += triple ? 3 : 1;
    std::string value;
    while (true) {
      if (pos_ >= text_.size()) return Error(start_line, "a string is not closed");
      const char c = text_[pos_];
      if (triple ? text_.substr(pos_, 3) == std::string(3, quote) : c == quote) {
        pos_ += triple ? 3 : 1;
        break;
      }
      if (c == '\n') {
        if (!triple) return Error(start_line, "a string is not closed on its line");
        value += c;
        ++pos_;
        NextLine(/*logical=*/false);
        continue;
      }
      if (c == '\\' && pos_ + 1 < text_.size()) {
        const char e = text_[pos_ + 1];
        pos_ += 2;
        if (raw) {
          value += c;
          value += e;
          continue;
        }
        switch (e) {
          case 'n':
            value += '\n';
            break;
          case 't':
            value += '\t';
            break;
          case 'r':
            value += '\r';
            break;
          case '0':
            value += '\0';
            break;
          case '\\':
            value += '\\';
            break;
          case '\'':
            value += '\'';
            break;
          case '"':
            value += '"';
            break;
          case '\n':
            NextLine(/*logical=*/false);
            break;  // a continued line
          default:
            value += '\\';
            value += e;
        }
        continue;
      }
      value += c;
      ++pos_;
    }
    Token t = Make(Token::Kind::kString, std::move(value), begin);
    t.line = start_line;
    return t;
  }

  absl::string_view text_;
  std::string file_;
  size_t pos_ = 0;
  size_t line_start_ = 0;
  int line_ = 1;
  int depth_ = 0;
  std::vector<int> open_lines_;  // where each open bracket was opened
  bool at_line_start_ = true;
};

// A Python number literal as ast.literal_eval reads it.
absl::StatusOr<GinValue> Number(const std::string& text) {
  const std::string digits = absl::StrReplaceAll(text, {{"_", ""}});
  const bool is_float =
      digits.find_first_of(".eE") != std::string::npos && digits.substr(0, 2) != "0x" && digits.substr(0, 2) != "0X";
  if (!is_float) {
    int base = 10;
    std::string body = digits;
    if (body.size() > 2 && body[0] == '0' && std::isalpha(static_cast<unsigned char>(body[1]))) {
      const char b = static_cast<char>(std::tolower(static_cast<unsigned char>(body[1])));
      base = b == 'x' ? 16 : b == 'o' ? 8 : b == 'b' ? 2 : 0;
      body = body.substr(2);
    }
    if (base != 0 && !body.empty() && std::isalnum(static_cast<unsigned char>(body[0]))) {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(body.c_str(), &end, base);  // NOLINT(runtime/int): strtoll's type
      if (end == body.c_str() + body.size() && errno == 0) return GinValue::Int(v);
    }
  } else {
    char* end = nullptr;
    errno = 0;
    const double v = std::strtod(digits.c_str(), &end);
    if (end == digits.c_str() + digits.size() && errno == 0) return GinValue::Float(v);
  }
  return absl::InvalidArgumentError(absl::StrCat("'", text, "' is not a number gin reads"));
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string file) : tokens_(std::move(tokens)), file_(std::move(file)) {}

  absl::StatusOr<std::vector<GinStatement>> Run() {
    std::vector<GinStatement> out;
    while (Peek().kind != Token::Kind::kEnd) {
      if (Peek().kind == Token::Kind::kNewline) {
        ++i_;
        continue;
      }
      TY_RETURN_IF_ERROR(Statement(&out));
    }
    return out;
  }

 private:
  const Token& Peek(size_t ahead = 0) const { return tokens_[std::min(i_ + ahead, tokens_.size() - 1)]; }
  bool IsOp(absl::string_view op, size_t ahead = 0) const {
    return Peek(ahead).kind == Token::Kind::kOp && Peek(ahead).text == op;
  }
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(absl::StrCat(file_, ":", Peek().line, ": ", what));
  }
  absl::Status Expect(absl::string_view op, absl::string_view what) {
    if (!IsOp(op)) return Error(absl::StrCat("expected ", what));
    ++i_;
    return absl::OkStatus();
  }
  absl::Status ExpectNewline() {
    if (Peek().kind != Token::Kind::kNewline && Peek().kind != Token::Kind::kEnd) {
      return Error(absl::StrCat("expected the end of the statement, found '", Peek().text, "'"));
    }
    if (Peek().kind == Token::Kind::kNewline) ++i_;
    return absl::OkStatus();
  }

  // NAME (('/' | '.') NAME)* written without spaces, as gin requires.
  absl::StatusOr<std::string> Selector(bool allow_periods_in_scope) {
    if (Peek().kind != Token::Kind::kName) return Error("expected a name");
    std::string out = Peek().text;
    int line = Peek().line, end = Peek().end_column;
    ++i_;
    while ((IsOp("/") || IsOp(".")) && Peek().line == line && Peek().column == end &&
           Peek(1).kind == Token::Kind::kName && Peek(1).line == line && Peek(1).column == Peek().end_column) {
      out += Peek().text + Peek(1).text;
      end = Peek(1).end_column;
      i_ += 2;
    }
    if ((IsOp("/") || IsOp(".")) && Peek().line == line) return Error(absl::StrCat("malformed name '", out, "...'"));
    // Scopes are identifiers (module paths for references and macros).
    const size_t slash = out.rfind('/');
    if (slash != std::string::npos && !allow_periods_in_scope && out.substr(0, slash).find('.') != std::string::npos) {
      return Error(absl::StrCat("malformed scope in '", out, "': scopes are names separated by '/'"));
    }
    return out;
  }

  absl::Status Statement(std::vector<GinStatement>* out) {
    GinStatement st;
    st.location = {file_, Peek().line};
    const int column = Peek().column;
    TY_ASSIGN_OR_RETURN(std::string key, Selector(/*allow_periods_in_scope=*/false));
    if (IsOp("=")) {
      ++i_;
      TY_ASSIGN_OR_RETURN(st.value, Value());
      SplitKey(key, &st);
      out->push_back(std::move(st));
      return ExpectNewline();
    }
    if (IsOp(":")) return Block(key, column, st.location, out);
    if (key == "import" || key == "from") {
      st.kind = GinStatement::Kind::kImport;
      st.is_from = key == "from";
      TY_ASSIGN_OR_RETURN(st.module, Selector(false));
      if (st.is_from) {
        if (Peek().kind != Token::Kind::kName || Peek().text != "import") return Error("expected 'import'");
        ++i_;
        if (Peek().kind != Token::Kind::kName) return Error("expected a module name after 'import'");
        st.module += "." + Peek().text;
        ++i_;
      }
      if (Peek().kind == Token::Kind::kName && Peek().text == "as") {
        ++i_;
        if (Peek().kind != Token::Kind::kName) return Error("expected a name after 'as'");
        st.alias = Peek().text;
        ++i_;
      }
      out->push_back(std::move(st));
      return ExpectNewline();
    }
    if (key == "include") {
      st.kind = GinStatement::Kind::kInclude;
      TY_ASSIGN_OR_RETURN(GinValue file, Value());
      if (file.kind != GinValue::Kind::kString) return Error("include takes a file path as a string");
      st.include = file.s;
      out->push_back(std::move(st));
      return ExpectNewline();
    }
    return Error(absl::StrCat("expected '=' or ':' after '", key, "'"));
  }

  static void SplitKey(const std::string& key, GinStatement* st) {
    const size_t slash = key.rfind('/');
    st->scope = slash == std::string::npos ? "" : key.substr(0, slash);
    std::string selector = slash == std::string::npos ? key : key.substr(slash + 1);
    const size_t dot = selector.rfind('.');
    st->selector = dot == std::string::npos ? selector : selector.substr(0, dot);
    st->arg = dot == std::string::npos ? "" : selector.substr(dot + 1);
  }

  // `scope/selector:` then indented `arg = value` lines.
  absl::Status Block(const std::string& key, int column, const GinLocation& where, std::vector<GinStatement>* out) {
    ++i_;  // ':'
    if (Peek().kind != Token::Kind::kNewline) return Error("expected a new line after ':'");
    ++i_;
    if (!Peek().starts_line || Peek().column <= column) return Error("expected an indented binding after ':'");
    const int body = Peek().column;
    GinStatement base;
    SplitKey(key + ".x", &base);
    while (Peek().kind == Token::Kind::kName && Peek().starts_line && Peek().column > column) {
      if (Peek().column != body) return Error("this line's indentation matches no block");
      GinStatement st = base;
      st.location = {file_, Peek().line};
      st.arg = Peek().text;
      ++i_;
      TY_RETURN_IF_ERROR(Expect("=", absl::StrCat("'=' after '", st.arg, "' in the block of ", where.ToString())));
      TY_ASSIGN_OR_RETURN(st.value, Value());
      out->push_back(std::move(st));
      TY_RETURN_IF_ERROR(ExpectNewline());
    }
    if (Peek().kind != Token::Kind::kEnd && Peek().column > column) {
      return Error("expected a binding 'name = value' in the block");
    }
    return absl::OkStatus();
  }

  absl::StatusOr<GinValue> Value() {
    const Token& t = Peek();
    if (IsOp("[") || IsOp("(") || IsOp("{")) return Container();
    if (IsOp("@")) {
      ++i_;
      TY_ASSIGN_OR_RETURN(std::string name, Selector(/*allow_periods_in_scope=*/true));
      bool evaluate = false;
      if (IsOp("(")) {
        ++i_;
        TY_RETURN_IF_ERROR(Expect(")", "')': a reference is called without arguments"));
        evaluate = true;
      }
      return GinValue::Reference(name, evaluate);
    }
    if (IsOp("%")) {
      ++i_;
      TY_ASSIGN_OR_RETURN(std::string name, Selector(/*allow_periods_in_scope=*/true));
      return GinValue::Macro(name);
    }
    bool negative = false;
    if (IsOp("-")) {
      negative = true;
      ++i_;
    }
    if (Peek().kind == Token::Kind::kNumber) {
      absl::StatusOr<GinValue> v = Number(Peek().text);
      if (!v.ok()) return Error(v.status().message());
      ++i_;
      if (negative) {
        if (v->kind == GinValue::Kind::kInt) v->i = -v->i;
        if (v->kind == GinValue::Kind::kFloat) v->f = -v->f;
      }
      return v;
    }
    if (negative) return Error("expected a number after '-'");
    if (t.kind == Token::Kind::kString) {
      std::string s;
      while (Peek().kind == Token::Kind::kString) s += tokens_[i_++].text;  // 'a' 'b' is 'ab'
      return GinValue::String(std::move(s));
    }
    if (t.kind == Token::Kind::kName) {
      if (t.text == "True" || t.text == "False") {
        ++i_;
        return GinValue::Bool(t.text == "True");
      }
      if (t.text == "None") {
        ++i_;
        return GinValue::None();
      }
      return Error(absl::StrCat(
          "'", t.text, "' is not a value: a value is a Python literal, @reference or %MACRO (quote a string)"));
    }
    return Error(absl::StrCat("expected a value, found '", t.text, "'"));
  }

  absl::StatusOr<GinValue> Container() {
    const std::string open = Peek().text;
    const std::string close = open == "[" ? "]" : open == "(" ? ")" : "}";
    ++i_;
    GinValue out;
    out.kind = open == "[" ? GinValue::Kind::kList : open == "(" ? GinValue::Kind::kTuple : GinValue::Kind::kDict;
    bool comma = false;
    while (!IsOp(close)) {
      TY_ASSIGN_OR_RETURN(GinValue item, Value());
      out.items.push_back(std::move(item));
      if (out.kind == GinValue::Kind::kDict) {
        TY_RETURN_IF_ERROR(Expect(":", "':' after a dict key"));
        TY_ASSIGN_OR_RETURN(GinValue value, Value());
        out.items.push_back(std::move(value));
      }
      if (IsOp(",")) {
        comma = true;
        ++i_;
      } else if (!IsOp(close)) {
        return Error(absl::StrCat("expected ',' or '", close, "'"));
      }
    }
    ++i_;
    // (x) without a comma is x itself.
    if (out.kind == GinValue::Kind::kTuple && out.items.size() == 1 && !comma) return out.items[0];
    return out;
  }

  std::vector<Token> tokens_;
  std::string file_;
  size_t i_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<GinStatement>> ParseGin(absl::string_view text, const std::string& file) {
  TY_ASSIGN_OR_RETURN(std::vector<Token> tokens, Lexer(text, file).Run());
  return Parser(std::move(tokens), file).Run();
}

}  // namespace trainyard
