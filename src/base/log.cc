#include "ferry/base/log.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <utility>

#include "ferry/base/json_string.h"

namespace ferry::logging {
namespace {

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string Rfc3339(int64_t ms) {
  const std::time_t seconds = static_cast<std::time_t>(ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", utc.tm_year + 1900,
                utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec,
                static_cast<int>(ms % 1000));
  return buf;
}

// Log text comes from requests and job output: invalid UTF-8 is written with
// U+FFFD in place of each bad byte rather than breaking the JSON line.
void AppendJsonString(std::string_view text, std::string* out) {
  const size_t mark = out->size();
  if (json_text::AppendQuoted(text, out)) return;
  out->resize(mark);
  std::string clean;
  clean.reserve(text.size());
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x80) {
      clean.push_back(static_cast<char>(*p++));
      continue;
    }
    const size_t n = json_text::Utf8SequenceLength(p, end);
    if (n == 0) {
      clean += "\xEF\xBF\xBD";
      ++p;
    } else {
      clean.append(reinterpret_cast<const char*>(p), n);
      p += n;
    }
  }
  json_text::AppendQuoted(clean, out);
}

bool NeedsQuotes(std::string_view value) {
  if (value.empty()) return true;
  for (const char c : value) {
    if (c == ' ' || c == '"' || c == '=' || static_cast<unsigned char>(c) < 0x20) return true;
  }
  return false;
}

}  // namespace

Result<Format> ParseFormat(std::string_view text) {
  if (text == "text") return Format::kText;
  if (text == "json") return Format::kJson;
  return Status::Invalid("log format must be text or json, not '" + std::string(text) + "'");
}

Field::Field(std::string_view k, double v) : key(k), number(true) {
  if (std::isfinite(v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.6g", v);
    value = buf;
  } else {
    value = "null";
  }
}

Logger::Logger(std::string component, Format format, std::FILE* out)
    : component_(std::move(component)), format_(format), out_(out != nullptr ? out : stderr) {}

std::string Logger::Render(std::string_view level, std::string_view message,
                           std::initializer_list<Field> fields, int64_t now_ms) const {
  std::string line;
  if (format_ == Format::kJson) {
    line = "{\"ts\":\"" + Rfc3339(now_ms) + "\",\"level\":";
    AppendJsonString(level, &line);
    line += ",\"component\":";
    AppendJsonString(component_, &line);
    line += ",\"msg\":";
    AppendJsonString(message, &line);
    for (const Field& f : fields) {
      line += ',';
      AppendJsonString(f.key, &line);
      line += ':';
      if (f.number) {
        line += f.value;
      } else {
        AppendJsonString(f.value, &line);
      }
    }
    line += '}';
    return line;
  }
  line = "ferry " + component_ + ": ";
  line.append(message);
  for (const Field& f : fields) {
    line += ' ';
    line.append(f.key);
    line += '=';
    if (f.number || !NeedsQuotes(f.value)) {
      line += f.value;
    } else {
      AppendJsonString(f.value, &line);
    }
  }
  return line;
}

void Logger::Write(std::string_view level, std::string_view message,
                   std::initializer_list<Field> fields) const {
  std::string line = Render(level, message, fields, NowMs());
  line += '\n';
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), out_);
  std::fflush(out_);
}

}  // namespace ferry::logging
