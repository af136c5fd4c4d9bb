// Sample arrays of every type for the exchange and codec tests: a list of
// types covering every type id, and deterministic values of any of them
// built through the generic builder API. Header-only, test-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "ferry/base/status.h"
#include "ferry/exchange/array.h"
#include "ferry/exchange/builder.h"
#include "ferry/exchange/type.h"

namespace ferry::testing {

// Text of 0..16 characters chosen by `seed`.
inline std::string SampleText(int64_t seed) {
  std::string text;
  // Some values are longer than a view's 12 inline bytes.
  for (int64_t i = 0; i < seed % 17; ++i) text.push_back(static_cast<char>('a' + (seed + i) % 26));
  return text;
}

inline Status AppendText(ArrayBuilder* builder, std::string_view text) {
  if (auto* binary = dynamic_cast<BaseBinaryBuilder<int32_t>*>(builder))
    return binary->Append(text);
  if (auto* large = dynamic_cast<BaseBinaryBuilder<int64_t>*>(builder)) return large->Append(text);
  if (auto* view = dynamic_cast<BinaryViewBuilder*>(builder)) return view->Append(text);
  return Status::TypeError("not a string builder");
}

// For types whose values full validation range-checks (decimals within
// their precision, times within a day, date64 whole days): a valid value for
// `seed`; nullopt for the others, whose every bit pattern is valid.
inline std::optional<int64_t> ValidSampleValue(const DataType& type, int64_t seed) {
  const int64_t mixed = (seed * 7919 + 17) & 0x7FFFFFFF;
  switch (type.id) {
    case TypeId::kDecimal32:
    case TypeId::kDecimal64:
    case TypeId::kDecimal128:
    case TypeId::kDecimal256: {
      int64_t limit = 1;
      for (int32_t d = 0; d < std::min(type.precision, 18); ++d) limit *= 10;
      const int64_t v = mixed % limit;
      return seed % 2 == 0 ? v : -v;
    }
    case TypeId::kTime32:
      return mixed % (type.unit == TimeUnit::kSecond ? 86'400 : 86'400'000);
    case TypeId::kTime64:
      return mixed * 1'000 %
             (type.unit == TimeUnit::kMicro ? 86'400'000'000LL : 86'400'000'000'000LL);
    case TypeId::kDate64:
      return (mixed % 40'000 - 20'000) * 86'400'000LL;
    default:
      return std::nullopt;
  }
}

// Appends one value chosen by `seed`; every fifth slot is null where nulls are allowed.
inline Status AppendSample(ArrayBuilder* builder, int64_t seed, bool allow_null = true) {
  const DataType& type = *builder->type();
  const bool make_null = allow_null && seed % 5 == 2;
  if (type.id == TypeId::kRunEndEncoded) {
    auto* runs = static_cast<RunEndEncodedBuilder*>(builder);
    if (make_null) return runs->AppendNulls(1 + seed % 2);
    FERRY_RETURN_NOT_OK(AppendSample(runs->value_builder(), seed, /*allow_null=*/false));
    return runs->AppendRun(1 + seed % 3);
  }
  if (make_null || type.id == TypeId::kNull) return builder->AppendNull();
  switch (type.id) {
    case TypeId::kBool:
      return static_cast<BooleanBuilder*>(builder)->Append(seed % 3 == 0);
    case TypeId::kBinary:
    case TypeId::kLargeBinary:
    case TypeId::kUtf8:
    case TypeId::kLargeUtf8:
    case TypeId::kBinaryView:
    case TypeId::kUtf8View:
      return AppendText(builder, SampleText(seed));
    case TypeId::kList:
      FERRY_RETURN_NOT_OK(static_cast<ListBuilder*>(builder)->Append());
      break;
    case TypeId::kLargeList:
      FERRY_RETURN_NOT_OK(static_cast<LargeListBuilder*>(builder)->Append());
      break;
    case TypeId::kListView:
      FERRY_RETURN_NOT_OK(static_cast<ListViewBuilder*>(builder)->Append());
      break;
    case TypeId::kLargeListView:
      FERRY_RETURN_NOT_OK(static_cast<LargeListViewBuilder*>(builder)->Append());
      break;
    case TypeId::kFixedSizeList: {
      FERRY_RETURN_NOT_OK(static_cast<FixedSizeListBuilder*>(builder)->Append());
      for (int32_t k = 0; k < type.list_size; ++k) {
        FERRY_RETURN_NOT_OK(AppendSample(builder->child(0), seed * 7 + k));
      }
      return Status::OK();
    }
    case TypeId::kStruct: {
      FERRY_RETURN_NOT_OK(static_cast<StructBuilder*>(builder)->Append());
      for (int child_index = 0; child_index < builder->num_children(); ++child_index) {
        FERRY_RETURN_NOT_OK(AppendSample(builder->child(child_index), seed + child_index + 1));
      }
      return Status::OK();
    }
    case TypeId::kMap: {
      auto* maps = static_cast<MapBuilder*>(builder);
      FERRY_RETURN_NOT_OK(maps->Append());
      for (int64_t k = 0; k < seed % 3; ++k) {
        FERRY_RETURN_NOT_OK(AppendSample(maps->key_builder(), seed * 3 + k, false));
        FERRY_RETURN_NOT_OK(AppendSample(maps->item_builder(), seed * 3 + k));
      }
      return Status::OK();
    }
    case TypeId::kDenseUnion:
    case TypeId::kSparseUnion: {
      auto* unions = static_cast<UnionBuilder*>(builder);
      const int8_t code = type.type_codes[static_cast<size_t>(seed) % type.type_codes.size()];
      FERRY_RETURN_NOT_OK(unions->Append(code));
      return AppendSample(unions->child_for_code(code), seed, /*allow_null=*/false);
    }
    case TypeId::kDictionary: {
      auto* dictionary_builder = static_cast<DictionaryBuilder*>(builder);
      const TypeId value_id = type.value_type->id;
      if (value_id == TypeId::kUtf8 || value_id == TypeId::kBinary ||
          value_id == TypeId::kLargeUtf8 || value_id == TypeId::kLargeBinary ||
          value_id == TypeId::kUtf8View || value_id == TypeId::kBinaryView) {
        return dictionary_builder->Append(SampleText(seed % 4 + 13));
      }
      return dictionary_builder->Append(seed % 4);
    }
    default: {
      auto* fixed = dynamic_cast<FixedBytesBuilder*>(builder);
      if (fixed == nullptr) return Status::TypeError("no sample for " + type.ToString());
      std::vector<uint8_t> bytes(static_cast<size_t>(fixed->byte_width()));
      if (std::optional<int64_t> value = ValidSampleValue(type, seed)) {
        // A value full validation accepts, little-endian, sign-extended.
        for (size_t j = 0; j < bytes.size(); ++j) {
          bytes[j] = j < 8 ? static_cast<uint8_t>(static_cast<uint64_t>(*value) >> (8 * j))
                           : (*value < 0 ? 0xFF : 0x00);
        }
      } else {
        for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<uint8_t>(seed * 31 + j);
      }
      return fixed->AppendBytes(bytes.data());
    }
  }
  // Variable-size lists: 0..3 items.
  for (int64_t k = 0; k < seed % 4; ++k) {
    FERRY_RETURN_NOT_OK(AppendSample(builder->child(0), seed * 5 + k));
  }
  return Status::OK();
}

// `count` values, seeds first_seed, first_seed + 1, ...
inline Result<ArrayDataPtr> BuildSamples(const TypePtr& type, int64_t count,
                                         int64_t first_seed = 0) {
  FERRY_ASSIGN_OR_RAISE(auto builder, MakeBuilder(type));
  for (int64_t seed = first_seed; seed < first_seed + count; ++seed) {
    FERRY_RETURN_NOT_OK(AppendSample(builder.get(), seed));
  }
  return builder->Finish();
}

// One value per seed, in order.
inline Result<ArrayDataPtr> BuildSamples(const TypePtr& type, const std::vector<int64_t>& seeds) {
  FERRY_ASSIGN_OR_RAISE(auto builder, MakeBuilder(type));
  for (int64_t seed : seeds) FERRY_RETURN_NOT_OK(AppendSample(builder.get(), seed));
  return builder->Finish();
}

// One or more types of every type id, flat and nested, with the parameters
// that change a type's layout or format string (units, time zones, widths,
// union type codes, sorted keys, ordered dictionaries). AppendSample covers all.
inline std::vector<TypePtr> EveryType() {
  return {
      null(),
      boolean(),
      int8(),
      uint8(),
      int16(),
      uint16(),
      int32(),
      uint32(),
      int64(),
      uint64(),
      float16(),
      float32(),
      float64(),
      decimal(32, 9, 2),
      decimal(64, 18, -3),
      decimal(128, 38, 10),
      decimal(256, 76, 0),
      binary(),
      large_binary(),
      binary_view(),
      utf8(),
      large_utf8(),
      utf8_view(),
      fixed_size_binary(5),
      date32(),
      date64(),
      time32(TimeUnit::kSecond),
      time32(TimeUnit::kMilli),
      time64(TimeUnit::kMicro),
      time64(TimeUnit::kNano),
      timestamp(TimeUnit::kSecond),
      timestamp(TimeUnit::kNano, "Europe/Paris"),
      timestamp(TimeUnit::kMicro, "UTC"),
      duration(TimeUnit::kMilli),
      interval_months(),
      interval_day_time(),
      interval_month_day_nano(),
      list(field("item", int32())),
      large_list(field("item", utf8(), /*nullable=*/false)),
      list_view(field("item", int16())),
      large_list_view(field("item", utf8_view())),
      fixed_size_list(field("item", int32()), 3),
      struct_({field("a", int32()), field("b's \\ name", utf8()),
               field("c", list(field("item", int8())))}),
      struct_({}),
      map(utf8(), int64()),
      map(int32(), list(field("item", utf8())), /*keys_sorted=*/true),
      dense_union({field("i", int32()), field("s", utf8())}, {4, 9}),
      sparse_union({field("i", int32()), field("s", utf8()), field("b", boolean())}),
      sparse_union({field("a", int8())}),
      run_end_encoded(int16(), utf8()),
      run_end_encoded(int32(), float64()),
      run_end_encoded(int64(), list(field("item", int32()))),
      dictionary(int8(), utf8()),
      dictionary(uint32(), int16(), /*ordered=*/true),
      dictionary(int64(), binary()),
      dictionary(uint8(), large_utf8()),
      list(field("item",
                 struct_({field("x", float64()),
                          field("y", dense_union({field("u", int8()), field("v", boolean())}))}))),
      struct_({field("inner", fixed_size_list(field("item", sparse_union({field("p", int32()),
                                                                          field("q", utf8())})),
                                              2))}),
      list(field("item", run_end_encoded(int32(), int32()))),
      list(field("item", dictionary(int16(), utf8()))),
      struct_({field("d", dictionary(uint8(), utf8_view()))}),
  };
}

}  // namespace ferry::testing
