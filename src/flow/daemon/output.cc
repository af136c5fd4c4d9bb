// Node output forwarding and log files (output.h).
#include "flow/daemon/output.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "ferry/exchange/builder.h"
#include "ferry/flow/node.h"

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

namespace {

// `text` with every byte that does not begin or continue a valid UTF-8
// sequence replaced by U+FFFD.
std::string ValidUtf8(std::string_view text) {
  std::string clean;
  clean.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80           ? 1
                    : (lead >> 5) == 0x6  ? 2
                    : (lead >> 4) == 0xE  ? 3
                    : (lead >> 3) == 0x1E ? 4
                                          : 0;
    bool valid = length > 0 && i + length <= text.size() && !(lead == 0xC0 || lead == 0xC1);
    for (size_t k = 1; valid && k < length; ++k) {
      valid = (static_cast<unsigned char>(text[i + k]) & 0xC0) == 0x80;
    }
    if (valid) {
      clean.append(text.substr(i, length));
      i += length;
    } else {
      clean.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return clean;
}

}  // namespace

Result<std::unique_ptr<StdoutPublisher>> StdoutPublisher::Create(const std::string& channel) {
  PublisherOptions options;
  options.send_timeout = std::chrono::milliseconds(100);
  options.segment_size = int64_t{1} << 20;
  FERRY_ASSIGN_OR_RAISE(std::unique_ptr<Publisher> publisher, Publisher::Create(channel, options));
  return std::unique_ptr<StdoutPublisher>(new StdoutPublisher(std::move(publisher)));
}

Status StdoutPublisher::Send(std::string_view line) {
  Utf8Builder builder(publisher_->LoanPool());
  FERRY_RETURN_NOT_OK(builder.Append(ValidUtf8(line) + "\n"));
  FERRY_ASSIGN_OR_RAISE(ArrayDataPtr array, builder.Finish());
  FERRY_ASSIGN_OR_RAISE(RecordBatchPtr batch, ArrayAsBatch(array, /*nullable=*/false));
  return publisher_->Send(*batch, {{std::string(kArrayMetadataKey), "1"}});
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
