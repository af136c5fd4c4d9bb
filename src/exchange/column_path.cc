#include "ferry/exchange/column_path.h"

namespace ferry {

std::string QuoteName(std::string_view name) {
  std::string quoted = "'";
  for (char c : name) {
    if (c == '\'' || c == '\\') quoted.push_back('\\');
    quoted.push_back(c);
  }
  quoted.push_back('\'');
  return quoted;
}

void ColumnPath::AppendTo(std::string* out) const {
  if (parent_ != nullptr) parent_->AppendTo(out);
  switch (step_) {
    case Step::kRoot:
      out->append(text_);
      return;
    case Step::kQuotedRoot:
      out->append(prefix_).append(" ").append(QuoteName(text_));
      return;
    case Step::kItem:
      out->append(".item");
      return;
    case Step::kEntries:
      out->append(".entries");
      return;
    case Step::kRunEnds:
      out->append(".run_ends");
      return;
    case Step::kValues:
      out->append(".values");
      return;
    case Step::kNamed:
      out->append(".").append(QuoteName(text_));
      return;
    case Step::kDictionary:
      out->append(".dictionary");
      return;
  }
}

}  // namespace ferry
