// Where an element of a text file (a YAML descriptor or config) was written.
#pragma once

namespace ferry {

// 1-based line and column; 0 when unknown.
struct SourceLocation {
  int line = 0;
  int column = 0;
};

}  // namespace ferry
