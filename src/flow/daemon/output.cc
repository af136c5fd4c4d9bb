// Node output forwarding and log files (output.h).
#include "flow/daemon/output.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

namespace ferry::flow::daemon {

std::vector<std::string> LineBuffer::Append(std::string_view bytes) {
  std::vector<std::string> lines;
  while (!bytes.empty()) {
    size_t newline = bytes.find('\n');
    std::string_view piece = newline == std::string_view::npos ? bytes : bytes.substr(0, newline);
    // Cut overlong lines at kMaxLine.
    if (pending_.size() + piece.size() >= kMaxLine) {
      size_t take = kMaxLine - pending_.size();
      pending_.append(piece.substr(0, take));
      lines.push_back(std::move(pending_));
      pending_.clear();
      bytes.remove_prefix(take);
      continue;
    }
    pending_.append(piece);
    if (newline == std::string_view::npos) break;
    if (!pending_.empty() && pending_.back() == '\r') pending_.pop_back();
    lines.push_back(std::move(pending_));
    pending_.clear();
    bytes.remove_prefix(newline + 1);
  }
  return lines;
}

std::vector<std::string> LineBuffer::Finish() {
  std::vector<std::string> lines;
  if (!pending_.empty()) lines.push_back(std::move(pending_));
  pending_.clear();
  return lines;
}

NodeOutput::~NodeOutput() {
  if (log_ != nullptr) std::fclose(log_);
}

Status NodeOutput::OpenLog(const std::string& path) {
  if (log_ != nullptr) std::fclose(log_);
  log_ = std::fopen(path.c_str(), "we");
  if (log_ == nullptr) {
    return Status::IOError("cannot create log file '" + path + "': " + std::strerror(errno));
  }
  log_path_ = path;
  return Status::OK();
}

void NodeOutput::Line(bool from_stderr, std::string_view line) {
  std::ostream* stream = from_stderr ? err_ : out_;
  if (stream != nullptr) {
    *stream << '[' << node_ << "] " << (from_stderr ? "(stderr) " : "") << line << '\n';
    stream->flush();
  }
  if (log_ != nullptr) {
    std::fwrite(line.data(), 1, line.size(), log_);
    std::fputc('\n', log_);
    std::fflush(log_);
  }
}

void NodeOutput::Note(std::string_view text, bool console) {
  if (console && err_ != nullptr) {
    *err_ << "[ferry] " << node_ << ": " << text << '\n';
    err_->flush();
  }
  if (log_ != nullptr) {
    std::fputs("[ferry] ", log_);
    std::fwrite(text.data(), 1, text.size(), log_);
    std::fputc('\n', log_);
    std::fflush(log_);
  }
}

Status MakeDirectories(const std::string& path) {
  if (path.empty()) return Status::OK();
  std::string prefix;
  size_t position = 0;
  while (position != std::string::npos) {
    position = path.find('/', position + 1);
    prefix = path.substr(0, position);
    if (prefix.empty()) continue;
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return Status::IOError("cannot create directory '" + prefix + "': " + std::strerror(errno));
    }
  }
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
    return Status::IOError("'" + path + "' is not a directory");
  }
  return Status::OK();
}

}  // namespace ferry::flow::daemon
