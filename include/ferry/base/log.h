// One line per event on stderr, as text for people or as JSON for log
// collectors (`--log-format json` on `ferry server` and `ferry agent`).
//
// JSON lines carry "ts" (UTC, RFC 3339 with milliseconds), "level",
// "component" and "msg", then the event's fields in the order given. Text
// lines read `ferry <component>: <msg> key=value ...` (no level: the text
// lines are the ones Ferry always printed) with values quoted as JSON strings
// when they are empty or hold a space, a quote, an equals sign or a control
// character.
#pragma once

#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <string>
#include <string_view>

#include "ferry/base/status.h"

namespace ferry::logging {

enum class Format { kText, kJson };

// "text" or "json"; anything else is kInvalid naming the accepted values.
Result<Format> ParseFormat(std::string_view text);

// A field of a log line: a string, or a number written unquoted in JSON.
struct Field {
  Field(std::string_view k, std::string_view v) : key(k), value(v) {}
  Field(std::string_view k, const std::string& v) : key(k), value(v) {}
  Field(std::string_view k, const char* v) : key(k), value(v) {}
  Field(std::string_view k, int64_t v) : key(k), value(std::to_string(v)), number(true) {}
  Field(std::string_view k, uint64_t v) : key(k), value(std::to_string(v)), number(true) {}
  Field(std::string_view k, int v) : key(k), value(std::to_string(v)), number(true) {}
  Field(std::string_view k, double v);

  std::string_view key;
  std::string value;
  bool number = false;
};

class Logger {
 public:
  // Writes to `out` (stderr when null); lines from several threads never mix.
  explicit Logger(std::string component, Format format = Format::kText, std::FILE* out = nullptr);

  void set_format(Format format) { format_ = format; }
  Format format() const { return format_; }

  void Info(std::string_view message, std::initializer_list<Field> fields = {}) const {
    Write("info", message, fields);
  }
  void Warn(std::string_view message, std::initializer_list<Field> fields = {}) const {
    Write("warn", message, fields);
  }
  void Error(std::string_view message, std::initializer_list<Field> fields = {}) const {
    Write("error", message, fields);
  }
  void Write(std::string_view level, std::string_view message,
             std::initializer_list<Field> fields) const;

  // The line Write would print at `now_ms` (Unix milliseconds), without the
  // trailing newline; for tests.
  std::string Render(std::string_view level, std::string_view message,
                     std::initializer_list<Field> fields, int64_t now_ms) const;

 private:
  std::string component_;
  Format format_;
  std::FILE* out_;
  mutable std::mutex mu_;
};

}  // namespace ferry::logging
