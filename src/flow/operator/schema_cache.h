// The imported form of the schemas one producer keeps sending. An operator
// exports a new ArrowSchema with every batch, nearly always describing the
// same thing; importing it (fields, types, metadata: a tree of allocations)
// every time costs more than the rest of a hand-off. SchemaCache compares
// the C schema with the last one it imported, field by field (format, name,
// metadata, flags, children, dictionary: what an import reads), and imports
// again only when something differs. Internal to the operator host and the
// C++ operator helper.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "ferry/base/status.h"
#include "ferry/c/abi.h"
#include "ferry/exchange/type.h"

namespace ferry::flow::internal {

// One imported schema, with what each hand-off needs of it.
struct ImportedSchema {
  ImportedSchema() = default;
  ~ImportedSchema();
  ImportedSchema(const ImportedSchema&) = delete;
  ImportedSchema& operator=(const ImportedSchema&) = delete;

  SchemaPtr schema;
  TypePtr struct_type;  // struct_(schema->fields), what ImportDeviceArray takes
  // The schema exported again, lent to consumers as their event's schema
  // (only when made with `export_c`; release is NULL otherwise).
  ArrowSchema exported{};
};
using ImportedSchemaPtr = std::shared_ptr<const ImportedSchema>;

// Wraps an imported schema (exports it for consumers when `export_c`).
Result<ImportedSchemaPtr> MakeImportedSchema(SchemaPtr schema, bool export_c);

class SchemaCache {
 public:
  explicit SchemaCache(bool export_c = false) : export_c_(export_c) {}

  // The import of `c_schema`: the cached one when c_schema describes the same
  // schema as the last call's, else a fresh ImportSchema (whose errors it
  // returns; a failed import leaves the cache empty).
  Result<ImportedSchemaPtr> Import(const ArrowSchema* c_schema);
  // The cached wrapper when `schema` is the same object as (or Equals) the
  // last one given here; else a new one.
  Result<ImportedSchemaPtr> Wrap(const SchemaPtr& schema);

  uint64_t hits() const { return hits_; }
  uint64_t imports() const { return imports_; }

 private:
  bool export_c_;
  std::string fingerprint_;  // what the cached C schema looked like
  ImportedSchemaPtr cached_;
  uint64_t hits_ = 0;
  uint64_t imports_ = 0;
};

}  // namespace ferry::flow::internal
