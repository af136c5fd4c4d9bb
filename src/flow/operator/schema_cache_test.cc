#include "flow/operator/schema_cache.h"

#include <gtest/gtest.h>

#include "ferry/exchange/bridge.h"
#include "testing/test_util.h"

namespace ferry::flow::internal {
namespace {

SchemaPtr MakeSchema(const std::string& name, TypePtr type, Metadata metadata = {}) {
  auto schema = std::make_shared<Schema>();
  schema->fields = {field(name, std::move(type)), field("nested", struct_({field("x", int32())}))};
  schema->metadata = std::move(metadata);
  return schema;
}

// Exports `schema` as a producer does for every batch.
struct Exported {
  explicit Exported(const Schema& schema) { EXPECT_TRUE(ExportSchema(schema, &c).ok()); }
  ~Exported() {
    if (c.release != nullptr) c.release(&c);
  }
  ArrowSchema c{};
};

TEST(SchemaCache, ImportsOnlyWhenTheProducerSchemaChanges) {
  SchemaCache cache(/*export_c=*/true);
  const SchemaPtr first = MakeSchema("a", int64(), {{"k", "v"}});
  ImportedSchemaPtr kept;
  for (int i = 0; i < 3; ++i) {
    Exported exported(*first);
    ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr imported, cache.Import(&exported.c));
    EXPECT_TRUE(imported->schema->Equals(*first));
    EXPECT_NE(imported->exported.release, nullptr);  // lent to consumers
    if (kept == nullptr) kept = imported;
    EXPECT_EQ(imported, kept);
  }
  EXPECT_EQ(cache.imports(), 1u);
  EXPECT_EQ(cache.hits(), 2u);

  // Each difference an import would see makes a new import.
  const SchemaPtr changes[] = {
      MakeSchema("b", int64(), {{"k", "v"}}),         // a name
      MakeSchema("b", int32(), {{"k", "v"}}),         // a type
      MakeSchema("b", int32(), {{"k", "w"}}),         // metadata
      MakeSchema("b", int32()),                       // no metadata
      MakeSchema("b", list(field("item", int32()))),  // children
  };
  uint64_t imports = cache.imports();
  for (const SchemaPtr& changed : changes) {
    Exported exported(*changed);
    ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr imported, cache.Import(&exported.c));
    EXPECT_TRUE(imported->schema->Equals(*changed)) << imported->schema->ToString();
    EXPECT_EQ(cache.imports(), ++imports);
    ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr again, cache.Import(&exported.c));
    EXPECT_EQ(again, imported);
  }
  // The first import is still valid for whoever holds it.
  EXPECT_TRUE(kept->schema->Equals(*first));
  ASSERT_OK_AND_ASSIGN(SchemaPtr reimported, ImportSchema(&kept->exported));
  EXPECT_TRUE(reimported->Equals(*first));
}

TEST(SchemaCache, NullabilityChangesAreSeen) {
  SchemaCache cache;
  auto nullable = std::make_shared<Schema>();
  nullable->fields = {field("a", int64(), true)};
  auto required = std::make_shared<Schema>();
  required->fields = {field("a", int64(), false)};
  Exported one(*nullable), two(*required);
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr first, cache.Import(&one.c));
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr second, cache.Import(&two.c));
  EXPECT_NE(first, second);
  EXPECT_FALSE(second->schema->fields[0].nullable);
  EXPECT_EQ(first->exported.release, nullptr);  // not asked to export
}

TEST(SchemaCache, BadSchemasAreRefusedEveryTime) {
  SchemaCache cache;
  Exported good(*MakeSchema("a", int64()));
  ASSERT_OK(cache.Import(&good.c).status());
  EXPECT_FALSE(cache.Import(nullptr).ok());
  // Not a struct: the import's error, and the cache forgets what it had.
  ArrowSchema not_struct;
  ASSERT_OK(ExportType(*int64(), &not_struct));
  EXPECT_FALSE(cache.Import(&not_struct).ok());
  EXPECT_FALSE(cache.Import(&not_struct).ok());
  not_struct.release(&not_struct);
  // A released schema.
  ArrowSchema released{};
  EXPECT_FALSE(cache.Import(&released).ok());
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr back, cache.Import(&good.c));
  EXPECT_EQ(back->schema->fields[0].name, "a");
}

TEST(SchemaCache, WrapsSchemasOfTheNode) {
  SchemaCache cache(/*export_c=*/true);
  const SchemaPtr schema = MakeSchema("a", int64());
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr first, cache.Wrap(schema));
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr same, cache.Wrap(MakeSchema("a", int64())));
  EXPECT_EQ(first, same);
  ASSERT_OK_AND_ASSIGN(ImportedSchemaPtr other, cache.Wrap(MakeSchema("b", int64())));
  EXPECT_NE(other, first);
  EXPECT_NE(other->exported.release, nullptr);
  EXPECT_FALSE(cache.Wrap(nullptr).ok());
}

}  // namespace
}  // namespace ferry::flow::internal
