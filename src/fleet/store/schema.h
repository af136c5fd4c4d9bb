// The store's schema as ordered migrations. Each migration is a list of
// statements valid for both SQLite and PostgreSQL after the dialect
// placeholders are replaced: {id} (an auto-assigned primary key), {real}
// (a double) and {blob} (bytes). Never edit a released migration; add one.
#pragma once

#include <string>
#include <vector>

#include "fleet/store/sql_db.h"

namespace ferry::fleet::sql {

struct Migration {
  int version;
  std::vector<const char*> statements;
};

const std::vector<Migration>& Migrations();

// The statement with its dialect placeholders replaced.
std::string ForDialect(Dialect dialect, const char* statement);

}  // namespace ferry::fleet::sql
