#include "fleet/sim/trace.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace ferry::fleet::sim {
namespace {

using nlohmann::json;

// ---- Small helpers

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::IOError(path + ": cannot open file");
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return Status::IOError(path + ": read failed");
  return out.str();
}

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::IOError(path + ": cannot open file for writing");
  out << text;
  out.close();
  if (!out) return Status::IOError(path + ": write failed");
  return Status::OK();
}

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

std::optional<double> ParseDouble(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  double value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<int64_t> ParseInt(std::string_view s) {
  s = Trim(s);
  if (s.empty()) return std::nullopt;
  if (s.front() == '+') s.remove_prefix(1);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return value;
}

std::string FormatDouble(double value) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);
  return ec == std::errc() ? std::string(buf, end) : std::string("0");
}

// Splits one CSV record (RFC 4180 quoting; a record never spans lines).
Result<std::vector<std::string>> SplitCsvLine(std::string_view line) {
  std::vector<std::string> fields;
  std::string field;
  size_t i = 0;
  bool quoted = false;
  bool was_quoted = false;
  while (i < line.size()) {
    char c = line[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < line.size() && line[i + 1] == '"') {
          field.push_back('"');
          ++i;
        } else {
          quoted = false;
        }
      } else {
        field.push_back(c);
      }
    } else if (c == '"') {
      if (!Trim(field).empty() || was_quoted) {
        return Status::Invalid("stray quote inside an unquoted field");
      }
      field.clear();
      quoted = true;
      was_quoted = true;
    } else if (c == ',') {
      if (!was_quoted) field = std::string(Trim(field));
      fields.push_back(std::move(field));
      field.clear();
      was_quoted = false;
    } else {
      if (was_quoted && c != ' ' && c != '\t' && c != '\r') {
        return Status::Invalid("text after a closing quote");
      }
      if (!was_quoted) field.push_back(c);
    }
    ++i;
  }
  if (quoted) return Status::Invalid("unterminated quoted field");
  if (!was_quoted) field = std::string(Trim(field));
  fields.push_back(std::move(field));
  return fields;
}

struct CsvLine {
  int number;  // 1-based
  std::string_view text;
};

// Lines of a text, without line endings; blank lines are left out.
std::vector<CsvLine> SplitLines(std::string_view text) {
  std::vector<CsvLine> lines;
  int number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    ++number;
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (!Trim(line).empty()) lines.push_back({number, line});
    pos = end + 1;
  }
  return lines;
}

// ---- Ferry's format: columns

constexpr const char* kColumns[] = {"id",
                                    "tenant",
                                    "team",
                                    "user",
                                    "submit_s",
                                    "duration_s",
                                    "tasks",
                                    "gpus_per_task",
                                    "gpu_model",
                                    "cpus_per_task",
                                    "memory_mb_per_task",
                                    "priority",
                                    "preemptible",
                                    "max_runtime_s",
                                    "datasets"};
const std::set<std::string> kRequired = {"id",         "tenant", "submit_s",
                                         "duration_s", "tasks",  "gpus_per_task"};

bool IsColumn(std::string_view name) {
  for (const char* c : kColumns) {
    if (name == c) return true;
  }
  return false;
}

// Sets one field of `job` from CSV text; the error names no column (the caller adds it).
Status SetFieldFromText(TraceJob* job, const std::string& column, std::string_view raw) {
  std::string_view text = Trim(raw);
  auto need_double = [&](double* out) -> Status {
    auto v = ParseDouble(text);
    if (!v) return Status::Invalid("expected a number, got '" + std::string(text) + "'");
    *out = *v;
    return Status::OK();
  };
  auto need_int = [&](int64_t lo, int64_t hi, int64_t* out) -> Status {
    auto v = ParseInt(text);
    if (!v) return Status::Invalid("expected an integer, got '" + std::string(text) + "'");
    if (*v < lo || *v > hi) {
      return Status::Invalid("out of range: " + std::string(text));
    }
    *out = *v;
    return Status::OK();
  };
  int64_t i = 0;
  // Text fields keep what the CSV splitter gave (quoted spaces survive).
  if (column == "id") {
    job->id = std::string(raw);
  } else if (column == "tenant") {
    job->tenant = std::string(raw);
  } else if (column == "team") {
    job->team = std::string(raw);
  } else if (column == "user") {
    job->user = std::string(raw);
  } else if (column == "gpu_model") {
    job->gpu_model = std::string(raw);
  } else if (column == "submit_s") {
    return need_double(&job->submit_s);
  } else if (column == "duration_s") {
    return need_double(&job->duration_s);
  } else if (column == "cpus_per_task") {
    return text.empty() ? Status::OK() : need_double(&job->cpus_per_task);
  } else if (column == "max_runtime_s") {
    return text.empty() ? Status::OK() : need_double(&job->max_runtime_s);
  } else if (column == "tasks") {
    FERRY_RETURN_NOT_OK(need_int(INT32_MIN, INT32_MAX, &i));
    job->tasks = static_cast<int>(i);
  } else if (column == "gpus_per_task") {
    FERRY_RETURN_NOT_OK(need_int(INT32_MIN, INT32_MAX, &i));
    job->gpus_per_task = static_cast<int>(i);
  } else if (column == "priority") {
    if (text.empty()) return Status::OK();
    FERRY_RETURN_NOT_OK(need_int(INT32_MIN, INT32_MAX, &i));
    job->priority = static_cast<int>(i);
  } else if (column == "memory_mb_per_task") {
    if (text.empty()) return Status::OK();
    FERRY_RETURN_NOT_OK(
        need_int(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &i));
    job->memory_mb_per_task = i;
  } else if (column == "preemptible") {
    if (text.empty() || text == "false" || text == "0") {
      job->preemptible = false;
    } else if (text == "true" || text == "1") {
      job->preemptible = true;
    } else {
      return Status::Invalid("expected true or false, got '" + std::string(text) + "'");
    }
  } else if (column == "datasets") {
    job->datasets.clear();
    if (text.empty()) return Status::OK();
    size_t pos = 0;
    while (true) {
      size_t end = text.find(';', pos);
      std::string_view item =
          Trim(text.substr(pos, end == std::string_view::npos ? end : end - pos));
      if (item.empty()) return Status::Invalid("empty dataset name in '" + std::string(text) + "'");
      job->datasets.emplace_back(item);
      if (end == std::string_view::npos) break;
      pos = end + 1;
    }
  }
  return Status::OK();
}

// Field-level rules; returns {field, message} of the first violation.
std::optional<std::pair<std::string, std::string>> FirstViolation(const TraceJob& job) {
  // A record is one line, so text fields cannot hold line breaks.
  const std::pair<const char*, const std::string*> texts[] = {{"id", &job.id},
                                                              {"tenant", &job.tenant},
                                                              {"team", &job.team},
                                                              {"user", &job.user},
                                                              {"gpu_model", &job.gpu_model}};
  for (const auto& [field, value] : texts) {
    if (value->find_first_of("\r\n") != std::string::npos) {
      return std::make_pair(std::string(field), std::string("must not contain line breaks"));
    }
  }
  if (job.id.empty()) return std::make_pair("id", "must not be empty");
  if (job.tenant.empty()) return std::make_pair("tenant", "must not be empty");
  if (!std::isfinite(job.submit_s) || job.submit_s < 0) {
    return std::make_pair("submit_s", "must be >= 0");
  }
  if (!std::isfinite(job.duration_s) || job.duration_s < 0) {
    return std::make_pair("duration_s", "must be >= 0");
  }
  if (job.tasks < 1) return std::make_pair("tasks", "must be >= 1");
  if (job.gpus_per_task < 0) return std::make_pair("gpus_per_task", "must be >= 0");
  if (!std::isfinite(job.cpus_per_task) || job.cpus_per_task < 0) {
    return std::make_pair("cpus_per_task", "must be >= 0");
  }
  if (job.memory_mb_per_task < 0) return std::make_pair("memory_mb_per_task", "must be >= 0");
  if (!std::isfinite(job.max_runtime_s) || job.max_runtime_s < 0) {
    return std::make_pair("max_runtime_s", "must be >= 0");
  }
  for (const auto& d : job.datasets) {
    if (d.empty()) return std::make_pair("datasets", "empty dataset name");
    if (Trim(d) != d || d.find_first_of("\r\n") != std::string::npos) {
      return std::make_pair("datasets",
                            "dataset name '" + d + "' has surrounding spaces or line breaks");
    }
    if (d.find(';') != std::string::npos) {
      return std::make_pair("datasets", "dataset name '" + d + "' contains ';'");
    }
  }
  return std::nullopt;
}

void SortBySubmit(std::vector<TraceJob>* jobs) {
  std::stable_sort(jobs->begin(), jobs->end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.submit_s < b.submit_s; });
}

// ---- JSON job fields

Status JobFromJson(const json& obj, const std::string& where, TraceJob* job) {
  if (!obj.is_object()) return Status::Invalid(where + ": expected an object");
  for (const auto& name : kRequired) {
    if (!obj.contains(name))
      return Status::Invalid(where + "." + name + ": missing required field");
  }
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    const std::string& key = it.key();
    const json& v = it.value();
    std::string at = where + "." + key;
    auto str = [&](std::string* out) -> Status {
      if (!v.is_string()) return Status::Invalid(at + ": expected a string");
      *out = v.get<std::string>();
      return Status::OK();
    };
    auto num = [&](double* out) -> Status {
      if (!v.is_number()) return Status::Invalid(at + ": expected a number");
      *out = v.get<double>();
      return Status::OK();
    };
    auto integer = [&](int64_t lo, int64_t hi, int64_t* out) -> Status {
      if (!v.is_number_integer()) return Status::Invalid(at + ": expected an integer");
      if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)) {
        return Status::Invalid(at + ": out of range");
      }
      int64_t x = v.get<int64_t>();
      if (x < lo || x > hi) return Status::Invalid(at + ": out of range");
      *out = x;
      return Status::OK();
    };
    int64_t i = 0;
    if (key == "id") {
      FERRY_RETURN_NOT_OK(str(&job->id));
    } else if (key == "tenant") {
      FERRY_RETURN_NOT_OK(str(&job->tenant));
    } else if (key == "team") {
      FERRY_RETURN_NOT_OK(str(&job->team));
    } else if (key == "user") {
      FERRY_RETURN_NOT_OK(str(&job->user));
    } else if (key == "gpu_model") {
      FERRY_RETURN_NOT_OK(str(&job->gpu_model));
    } else if (key == "submit_s") {
      FERRY_RETURN_NOT_OK(num(&job->submit_s));
    } else if (key == "duration_s") {
      FERRY_RETURN_NOT_OK(num(&job->duration_s));
    } else if (key == "cpus_per_task") {
      FERRY_RETURN_NOT_OK(num(&job->cpus_per_task));
    } else if (key == "max_runtime_s") {
      FERRY_RETURN_NOT_OK(num(&job->max_runtime_s));
    } else if (key == "tasks") {
      FERRY_RETURN_NOT_OK(integer(INT32_MIN, INT32_MAX, &i));
      job->tasks = static_cast<int>(i);
    } else if (key == "gpus_per_task") {
      FERRY_RETURN_NOT_OK(integer(INT32_MIN, INT32_MAX, &i));
      job->gpus_per_task = static_cast<int>(i);
    } else if (key == "priority") {
      FERRY_RETURN_NOT_OK(integer(INT32_MIN, INT32_MAX, &i));
      job->priority = static_cast<int>(i);
    } else if (key == "memory_mb_per_task") {
      FERRY_RETURN_NOT_OK(
          integer(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &i));
      job->memory_mb_per_task = i;
    } else if (key == "preemptible") {
      if (!v.is_boolean()) return Status::Invalid(at + ": expected true or false");
      job->preemptible = v.get<bool>();
    } else if (key == "datasets") {
      if (!v.is_array()) return Status::Invalid(at + ": expected an array of strings");
      job->datasets.clear();
      for (size_t k = 0; k < v.size(); ++k) {
        if (!v[k].is_string()) {
          return Status::Invalid(at + "[" + std::to_string(k) + "]: expected a string");
        }
        job->datasets.push_back(v[k].get<std::string>());
      }
    } else {
      return Status::Invalid(at + ": unknown field");
    }
  }
  return Status::OK();
}

json JobToJson(const TraceJob& job) {
  json j = json::object();
  j["id"] = job.id;
  j["tenant"] = job.tenant;
  j["team"] = job.team;
  j["user"] = job.user;
  j["submit_s"] = job.submit_s;
  j["duration_s"] = job.duration_s;
  j["tasks"] = job.tasks;
  j["gpus_per_task"] = job.gpus_per_task;
  j["gpu_model"] = job.gpu_model;
  j["cpus_per_task"] = job.cpus_per_task;
  j["memory_mb_per_task"] = job.memory_mb_per_task;
  j["priority"] = job.priority;
  j["preemptible"] = job.preemptible;
  j["max_runtime_s"] = job.max_runtime_s;
  j["datasets"] = job.datasets;
  return j;
}

// ---- Importers: shared parts

// Parses "YYYY-MM-DD HH:MM:SS" (also with 'T', optional fractional seconds) as UTC seconds.
std::optional<double> ParseTimestamp(std::string_view s) {
  s = Trim(s);
  if (s.size() < 19) return std::nullopt;
  auto digits = [&](size_t pos, size_t n) -> std::optional<int> {
    int v = 0;
    for (size_t k = pos; k < pos + n; ++k) {
      if (s[k] < '0' || s[k] > '9') return std::nullopt;
      v = v * 10 + (s[k] - '0');
    }
    return v;
  };
  if (s[4] != '-' || s[7] != '-' || (s[10] != ' ' && s[10] != 'T') || s[13] != ':' ||
      s[16] != ':') {
    return std::nullopt;
  }
  auto y = digits(0, 4), mo = digits(5, 2), d = digits(8, 2), h = digits(11, 2), mi = digits(14, 2),
       sec = digits(17, 2);
  if (!y || !mo || !d || !h || !mi || !sec) return std::nullopt;
  if (*mo < 1 || *mo > 12 || *d < 1 || *d > 31 || *h > 23 || *mi > 59 || *sec > 60) {
    return std::nullopt;
  }
  double frac = 0;
  if (s.size() > 19) {
    if (s[19] != '.') return std::nullopt;
    auto f = ParseDouble(std::string("0") + std::string(s.substr(19)));
    if (!f) return std::nullopt;
    frac = *f;
  }
  // Days from the civil date (Howard Hinnant's algorithm).
  int yy = *y - (*mo <= 2 ? 1 : 0);
  int era = (yy >= 0 ? yy : yy - 399) / 400;
  int yoe = yy - era * 400;
  int mp = (*mo + 9) % 12;
  int doy = (153 * mp + 2) / 5 + *d - 1;
  int doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  int64_t days = static_cast<int64_t>(era) * 146097 + doe - 719468;
  return static_cast<double>(days * 86400 + int64_t{*h} * 3600 + int64_t{*mi} * 60 + *sec) + frac;
}

// A record that ran, with absolute times, before windowing and rebasing.
struct Candidate {
  TraceJob job;
  double submit_abs = 0;
};

std::vector<TraceJob> FinishImport(std::vector<Candidate> candidates, double earliest_submit,
                                   const ImportOptions& options, ImportStats* stats) {
  std::stable_sort(
      candidates.begin(), candidates.end(),
      [](const Candidate& a, const Candidate& b) { return a.submit_abs < b.submit_abs; });
  std::vector<Candidate> kept;
  for (auto& c : candidates) {
    double offset = c.submit_abs - earliest_submit;
    if (offset < options.window_start_s ||
        (options.window_end_s > 0 && offset >= options.window_end_s)) {
      ++stats->skipped["outside_window"];
      continue;
    }
    if (options.max_jobs > 0 && static_cast<int64_t>(kept.size()) >= options.max_jobs) {
      ++stats->skipped["over_max_jobs"];
      continue;
    }
    kept.push_back(std::move(c));
  }
  std::vector<TraceJob> jobs;
  jobs.reserve(kept.size());
  double base = kept.empty() ? 0 : kept.front().submit_abs;
  for (auto& c : kept) {
    c.job.submit_s = c.submit_abs - base;
    c.job.gpu_model = options.gpu_model;
    jobs.push_back(std::move(c.job));
  }
  stats->kept = static_cast<int64_t>(jobs.size());
  return jobs;
}

Status CheckImportOptions(const ImportOptions& options) {
  if (options.max_jobs < 0) return Status::Invalid("max_jobs must be >= 0");
  if (!std::isfinite(options.window_start_s) || options.window_start_s < 0 ||
      !std::isfinite(options.window_end_s) || options.window_end_s < 0) {
    return Status::Invalid("the time window must be finite and >= 0");
  }
  if (options.window_end_s > 0 && options.window_end_s <= options.window_start_s) {
    return Status::Invalid("window_end_s must be after window_start_s");
  }
  return Status::OK();
}

// A time field from Philly: a string timestamp; null or "None" means absent.
enum class TimeField { kAbsent, kBad, kOk };
TimeField PhillyTime(const json& obj, const char* key, double* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return TimeField::kAbsent;
  if (!it->is_string()) return TimeField::kBad;
  const std::string& s = it->get_ref<const std::string&>();
  if (s.empty() || s == "None") return TimeField::kAbsent;
  auto t = ParseTimestamp(s);
  if (!t) return TimeField::kBad;
  *out = *t;
  return TimeField::kOk;
}

std::string JsonString(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return "";
  return it->get<std::string>();
}

// Splits a total GPU count over `nodes` as a gang: per-task GPUs rounded up.
void SetGang(TraceJob* job, int64_t nodes, int64_t gpus) {
  nodes = std::clamp<int64_t>(nodes, 1, std::max<int64_t>(gpus, 1));
  job->tasks = static_cast<int>(nodes);
  job->gpus_per_task = static_cast<int>((gpus + nodes - 1) / nodes);
}

}  // namespace

std::string CsvQuote(std::string_view s) {
  bool needs = s.empty()
                   ? false
                   : (s.find_first_of(",\"\n\r") != std::string_view::npos || s.front() == ' ' ||
                      s.back() == ' ' || s.front() == '\t' || s.back() == '\t');
  if (!needs) return std::string(s);
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out.push_back('"');
    out.push_back(c);
  }
  out.push_back('"');
  return out;
}

// ---- Public: Ferry's format

Status ValidateJob(const TraceJob& job) {
  if (auto v = FirstViolation(job)) return Status::Invalid(v->first + ": " + v->second);
  return Status::OK();
}

Result<std::vector<TraceJob>> ParseTraceCsv(std::string_view text, std::string_view name_view) {
  std::string name(name_view);
  std::vector<CsvLine> lines = SplitLines(text);
  if (lines.empty()) return Status::Invalid(name + ": empty file, expected a header row");
  const CsvLine& header_line = lines.front();
  auto at = [&](int line) { return name + ":" + std::to_string(line) + ": "; };
  auto header_or = SplitCsvLine(header_line.text);
  if (!header_or.ok())
    return Status::Invalid(at(header_line.number) + header_or.status().message());
  std::vector<std::string> header;
  std::set<std::string> seen;
  for (const auto& raw : *header_or) {
    std::string column(Trim(raw));
    if (!IsColumn(column))
      return Status::Invalid(at(header_line.number) + column + ": unknown column");
    if (!seen.insert(column).second) {
      return Status::Invalid(at(header_line.number) + column + ": duplicate column");
    }
    header.push_back(column);
  }
  for (const char* c : kColumns) {
    if (kRequired.count(c) && !seen.count(c)) {
      return Status::Invalid(at(header_line.number) + c + ": missing required column");
    }
  }
  std::vector<TraceJob> jobs;
  std::unordered_map<std::string, int> id_lines;
  for (size_t k = 1; k < lines.size(); ++k) {
    const CsvLine& line = lines[k];
    auto fields_or = SplitCsvLine(line.text);
    if (!fields_or.ok()) return Status::Invalid(at(line.number) + fields_or.status().message());
    const auto& fields = *fields_or;
    if (fields.size() != header.size()) {
      return Status::Invalid(at(line.number) + "expected " + std::to_string(header.size()) +
                             " fields, got " + std::to_string(fields.size()));
    }
    TraceJob job;
    for (size_t f = 0; f < fields.size(); ++f) {
      Status st = SetFieldFromText(&job, header[f], fields[f]);
      if (!st.ok()) return Status::Invalid(at(line.number) + header[f] + ": " + st.message());
    }
    if (auto v = FirstViolation(job)) {
      return Status::Invalid(at(line.number) + v->first + ": " + v->second);
    }
    auto [it, inserted] = id_lines.emplace(job.id, line.number);
    if (!inserted) {
      return Status::Invalid(at(line.number) + "id: duplicate id '" + job.id + "' (first on line " +
                             std::to_string(it->second) + ")");
    }
    jobs.push_back(std::move(job));
  }
  SortBySubmit(&jobs);
  return jobs;
}

Result<std::vector<TraceJob>> ParseTraceJson(std::string_view text, std::string_view name_view) {
  std::string name(name_view);
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return Status::Invalid(name + ": invalid JSON at byte " + std::to_string(e.byte));
  } catch (const json::exception& e) {
    return Status::Invalid(name + ": invalid JSON: " + e.what());
  }
  const json* array = &doc;
  std::string prefix = "jobs";
  if (doc.is_object()) {
    auto it = doc.find("jobs");
    if (it == doc.end()) return Status::Invalid(name + ": jobs: missing required field");
    for (auto k = doc.begin(); k != doc.end(); ++k) {
      if (k.key() != "jobs") return Status::Invalid(name + ": " + k.key() + ": unknown field");
    }
    array = &*it;
    if (!array->is_array()) return Status::Invalid(name + ": jobs: expected an array");
  } else if (!doc.is_array()) {
    return Status::Invalid(name + ": expected an array of jobs or an object with \"jobs\"");
  }
  std::vector<TraceJob> jobs;
  std::unordered_map<std::string, size_t> ids;
  for (size_t k = 0; k < array->size(); ++k) {
    std::string where = "jobs[" + std::to_string(k) + "]";
    TraceJob job;
    Status st = JobFromJson((*array)[k], where, &job);
    if (!st.ok()) return Status::Invalid(name + ": " + st.message());
    if (auto v = FirstViolation(job)) {
      return Status::Invalid(name + ": " + where + "." + v->first + ": " + v->second);
    }
    auto [it, inserted] = ids.emplace(job.id, k);
    if (!inserted) {
      return Status::Invalid(name + ": " + where + ".id: duplicate id '" + job.id +
                             "' (first at jobs[" + std::to_string(it->second) + "])");
    }
    jobs.push_back(std::move(job));
  }
  SortBySubmit(&jobs);
  return jobs;
}

Result<std::vector<TraceJob>> ReadTrace(const std::string& path) {
  bool csv = EndsWith(path, ".csv");
  bool js = EndsWith(path, ".json");
  if (!csv && !js) return Status::Invalid(path + ": unknown trace format (use .csv or .json)");
  FERRY_ASSIGN_OR_RAISE(std::string text, ReadFile(path));
  return csv ? ParseTraceCsv(text, path) : ParseTraceJson(text, path);
}

std::string FormatTraceCsv(const std::vector<TraceJob>& jobs) {
  std::string out;
  for (size_t c = 0; c < std::size(kColumns); ++c) {
    if (c) out.push_back(',');
    out += kColumns[c];
  }
  out.push_back('\n');
  for (const auto& j : jobs) {
    std::string datasets;
    for (size_t k = 0; k < j.datasets.size(); ++k) {
      if (k) datasets.push_back(';');
      datasets += j.datasets[k];
    }
    const std::string fields[] = {CsvQuote(j.id),
                                  CsvQuote(j.tenant),
                                  CsvQuote(j.team),
                                  CsvQuote(j.user),
                                  FormatDouble(j.submit_s),
                                  FormatDouble(j.duration_s),
                                  std::to_string(j.tasks),
                                  std::to_string(j.gpus_per_task),
                                  CsvQuote(j.gpu_model),
                                  FormatDouble(j.cpus_per_task),
                                  std::to_string(j.memory_mb_per_task),
                                  std::to_string(j.priority),
                                  j.preemptible ? "true" : "false",
                                  FormatDouble(j.max_runtime_s),
                                  CsvQuote(datasets)};
    for (size_t c = 0; c < std::size(fields); ++c) {
      if (c) out.push_back(',');
      out += fields[c];
    }
    out.push_back('\n');
  }
  return out;
}

std::string FormatTraceJson(const std::vector<TraceJob>& jobs) {
  json doc = json::object();
  json array = json::array();
  for (const auto& j : jobs) array.push_back(JobToJson(j));
  doc["jobs"] = std::move(array);
  return doc.dump(1) + "\n";
}

Status WriteTrace(const std::string& path, const std::vector<TraceJob>& jobs) {
  bool csv = EndsWith(path, ".csv");
  if (!csv && !EndsWith(path, ".json")) {
    return Status::Invalid(path + ": unknown trace format (use .csv or .json)");
  }
  std::unordered_set<std::string> ids;
  for (size_t k = 0; k < jobs.size(); ++k) {
    std::string where = "jobs[" + std::to_string(k) + "].";
    if (auto v = FirstViolation(jobs[k])) {
      return Status::Invalid(path + ": " + where + v->first + ": " + v->second);
    }
    if (!ids.insert(jobs[k].id).second) {
      return Status::Invalid(path + ": " + where + "id: duplicate id '" + jobs[k].id + "'");
    }
  }
  return WriteFile(path, csv ? FormatTraceCsv(jobs) : FormatTraceJson(jobs));
}

// ---- Public: importers

int64_t ImportStats::skipped_total() const {
  int64_t total = 0;
  for (const auto& [reason, n] : skipped) total += n;
  return total;
}

Result<std::vector<TraceJob>> ImportPhilly(const std::string& path, const ImportOptions& options,
                                           ImportStats* stats_out) {
  Status opt = CheckImportOptions(options);
  if (!opt.ok()) return Status::Invalid(path + ": " + opt.message());
  FERRY_ASSIGN_OR_RAISE(std::string text, ReadFile(path));
  if (Trim(text).empty() || text.find_first_not_of(" \t\r\n") == std::string::npos) {
    return Status::Invalid(path + ": empty file");
  }
  json doc = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    return Status::Invalid(path + ": not a Philly cluster_job_log: invalid JSON");
  }
  if (!doc.is_array()) {
    return Status::Invalid(path + ": not a Philly cluster_job_log: expected a JSON array of jobs");
  }
  if (!doc.empty()) {
    const json& first = doc.front();
    for (const char* key : {"jobid", "submitted_time", "attempts"}) {
      if (!first.is_object() || !first.contains(key)) {
        return Status::Invalid(path + ": not a Philly cluster_job_log: the first job has no '" +
                               std::string(key) + "'");
      }
    }
  }
  ImportStats stats;
  std::vector<Candidate> candidates;
  double earliest = std::numeric_limits<double>::infinity();
  for (const json& rec : doc) {
    ++stats.read;
    if (!rec.is_object() || !rec.contains("jobid") || !rec["jobid"].is_string() ||
        !rec.contains("attempts") || !rec["attempts"].is_array()) {
      ++stats.skipped["malformed"];
      continue;
    }
    double submit = 0;
    if (PhillyTime(rec, "submitted_time", &submit) != TimeField::kOk) {
      ++stats.skipped["bad_time"];
      continue;
    }
    earliest = std::min(earliest, submit);
    // Run time is the sum over attempts that started; the first started attempt's
    // allocation gives the gang shape.
    double run = 0;
    bool started = false, unfinished = false, bad_time = false, malformed = false;
    int64_t nodes = 0, gpus = 0, max_per_node = 0;
    for (const json& attempt : rec["attempts"]) {
      if (!attempt.is_object()) {
        malformed = true;
        break;
      }
      double start = 0, end = 0;
      TimeField s = PhillyTime(attempt, "start_time", &start);
      if (s == TimeField::kAbsent) continue;
      TimeField e = PhillyTime(attempt, "end_time", &end);
      if (s == TimeField::kBad || e == TimeField::kBad || (e == TimeField::kOk && end < start)) {
        bad_time = true;
        break;
      }
      if (e == TimeField::kAbsent) {
        unfinished = true;
        break;
      }
      if (!started) {
        auto detail = attempt.find("detail");
        if (detail == attempt.end() || !detail->is_array()) {
          malformed = true;
          break;
        }
        for (const json& node : *detail) {
          if (!node.is_object() || !node.contains("gpus") || !node["gpus"].is_array()) {
            malformed = true;
            break;
          }
          int64_t n = static_cast<int64_t>(node["gpus"].size());
          if (n > 0) {
            ++nodes;
            gpus += n;
            max_per_node = std::max(max_per_node, n);
          }
        }
        if (malformed) break;
      }
      started = true;
      run += end - start;
    }
    const char* reason = malformed    ? "malformed"
                         : bad_time   ? "bad_time"
                         : unfinished ? "no_end_time"
                         : !started   ? "never_ran"
                         : gpus == 0  ? "no_gpus"
                                      : nullptr;
    if (reason) {
      ++stats.skipped[reason];
      continue;
    }
    Candidate c;
    c.submit_abs = submit;
    c.job.id = rec["jobid"].get<std::string>();
    c.job.tenant = JsonString(rec, "vc");
    if (c.job.tenant.empty()) c.job.tenant = "default";
    c.job.user = JsonString(rec, "user");
    c.job.duration_s = run;
    // Uneven allocations ask for the largest per-node share on every node.
    c.job.tasks = static_cast<int>(nodes);
    c.job.gpus_per_task = static_cast<int>(max_per_node);
    candidates.push_back(std::move(c));
  }
  std::vector<TraceJob> jobs = FinishImport(std::move(candidates), earliest, options, &stats);
  if (stats_out) *stats_out = stats;
  return jobs;
}

Result<std::vector<TraceJob>> ImportHelios(const std::string& path, const ImportOptions& options,
                                           ImportStats* stats_out) {
  Status opt = CheckImportOptions(options);
  if (!opt.ok()) return Status::Invalid(path + ": " + opt.message());
  FERRY_ASSIGN_OR_RAISE(std::string text, ReadFile(path));
  std::vector<CsvLine> lines = SplitLines(text);
  if (lines.empty()) return Status::Invalid(path + ": empty file");
  auto header_or = SplitCsvLine(lines.front().text);
  if (!header_or.ok()) {
    return Status::Invalid(path +
                           ": not a Helios cluster_log.csv: " + header_or.status().message());
  }
  std::unordered_map<std::string, size_t> col;
  for (size_t k = 0; k < header_or->size(); ++k) col.emplace(std::string(Trim((*header_or)[k])), k);
  for (const char* required : {"job_id", "gpu_num", "submit_time", "start_time", "end_time"}) {
    if (!col.count(required)) {
      return Status::Invalid(path + ": not a Helios cluster_log.csv: missing column '" +
                             std::string(required) + "'");
    }
  }
  auto index = [&](const char* name) -> std::optional<size_t> {
    auto it = col.find(name);
    if (it == col.end()) return std::nullopt;
    return it->second;
  };
  const auto i_user = index("user"), i_vc = index("vc"), i_cpu = index("cpu_num"),
             i_nodes = index("node_num"), i_state = index("state");
  const size_t i_id = col["job_id"], i_gpu = col["gpu_num"], i_submit = col["submit_time"],
               i_start = col["start_time"], i_end = col["end_time"];
  ImportStats stats;
  std::vector<Candidate> candidates;
  double earliest = std::numeric_limits<double>::infinity();
  for (size_t k = 1; k < lines.size(); ++k) {
    ++stats.read;
    auto fields_or = SplitCsvLine(lines[k].text);
    if (!fields_or.ok() || fields_or->size() != header_or->size()) {
      ++stats.skipped["malformed"];
      continue;
    }
    const auto& f = *fields_or;
    auto get = [&](std::optional<size_t> i) -> std::string_view {
      return i ? Trim(f[*i]) : std::string_view();
    };
    std::string_view id = Trim(f[i_id]);
    auto gpu = ParseInt(f[i_gpu]);
    std::optional<int64_t> nodes = int64_t{1};
    if (i_nodes && !get(i_nodes).empty()) nodes = ParseInt(get(i_nodes));
    std::optional<double> cpus = 0.0;
    if (i_cpu && !get(i_cpu).empty()) cpus = ParseDouble(get(i_cpu));
    // Counts beyond any real machine are corrupt rows (and would overflow the int fields).
    constexpr int64_t kMaxCount = 1'000'000;
    if (id.empty() || !gpu || *gpu < 0 || *gpu > kMaxCount || !nodes || *nodes < 0 ||
        *nodes > kMaxCount || !cpus || *cpus < 0) {
      ++stats.skipped["malformed"];
      continue;
    }
    auto submit = ParseTimestamp(f[i_submit]);
    if (!submit) {
      ++stats.skipped["bad_time"];
      continue;
    }
    earliest = std::min(earliest, *submit);
    std::string_view start_text = Trim(f[i_start]), end_text = Trim(f[i_end]);
    if (start_text.empty() || start_text == "None") {
      ++stats.skipped["never_ran"];
      continue;
    }
    if (end_text.empty() || end_text == "None") {
      ++stats.skipped["no_end_time"];
      continue;
    }
    auto start = ParseTimestamp(start_text), end = ParseTimestamp(end_text);
    if (!start || !end || *end < *start) {
      ++stats.skipped["bad_time"];
      continue;
    }
    // Helios records jobs cancelled in the queue with start == end.
    if (*end == *start && get(i_state) == "CANCELLED") {
      ++stats.skipped["never_ran"];
      continue;
    }
    if (*gpu == 0) {
      ++stats.skipped["no_gpus"];
      continue;
    }
    Candidate c;
    c.submit_abs = *submit;
    c.job.id = std::string(id);
    c.job.tenant = std::string(get(i_vc));
    if (c.job.tenant.empty()) c.job.tenant = "default";
    c.job.user = std::string(get(i_user));
    c.job.duration_s = *end - *start;
    SetGang(&c.job, *nodes == 0 ? 1 : *nodes, *gpu);
    c.job.cpus_per_task = *cpus / c.job.tasks;
    candidates.push_back(std::move(c));
  }
  std::vector<TraceJob> jobs = FinishImport(std::move(candidates), earliest, options, &stats);
  if (stats_out) *stats_out = stats;
  return jobs;
}

}  // namespace ferry::fleet::sim
