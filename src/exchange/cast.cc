#include "ferry/exchange/cast.h"

#include "ferry/exchange/validate.h"

namespace ferry {
namespace {

// Maps each type id to the id of its physical layout class.
TypeId LayoutClass(TypeId id) {
  switch (id) {
    case TypeId::kUtf8:
      return TypeId::kBinary;
    case TypeId::kLargeUtf8:
      return TypeId::kLargeBinary;
    case TypeId::kUtf8View:
      return TypeId::kBinaryView;
    default:
      return id;
  }
}

bool IsStringLike(TypeId id) {
  return id == TypeId::kUtf8 || id == TypeId::kLargeUtf8 || id == TypeId::kUtf8View;
}

}  // namespace

bool SameLayout(const DataType& from, const DataType& to) {
  if (LayoutClass(from.id) != LayoutClass(to.id)) return false;
  if (from.id == TypeId::kDictionary) {
    return from.index_type->Equals(*to.index_type) && SameLayout(*from.value_type, *to.value_type);
  }
  if (from.children.size() != to.children.size()) return false;
  for (size_t i = 0; i < from.children.size(); ++i) {
    if (!SameLayout(*from.children[i].type, *to.children[i].type)) return false;
  }
  // Every parameter that shapes the bytes must agree.
  return from.byte_width == to.byte_width && from.list_size == to.list_size &&
         from.type_codes == to.type_codes &&
         (from.id != TypeId::kTime32 && from.id != TypeId::kTime64 &&
                  from.id != TypeId::kTimestamp && from.id != TypeId::kDuration
              ? true
              : from.unit == to.unit && from.timezone == to.timezone) &&
         from.precision == to.precision && from.scale == to.scale;
}

Result<ArrayDataPtr> ViewAs(const ArrayDataPtr& data, const TypePtr& to, bool check_utf8) {
  if (!SameLayout(*data->type, *to)) {
    return Status::TypeError("cannot view " + data->type->ToString() + " as " + to->ToString() +
                             " without copying: layouts differ");
  }
  auto out = std::make_shared<ArrayData>(*data);
  out->type = to;
  const DataType& to_type = *to;
  for (size_t i = 0; i < out->children.size(); ++i) {
    FERRY_ASSIGN_OR_RAISE(out->children[i],
                          ViewAs(out->children[i], to_type.children[i].type, check_utf8));
  }
  if (out->dictionary) {
    FERRY_ASSIGN_OR_RAISE(out->dictionary, ViewAs(out->dictionary, to_type.value_type, check_utf8));
  }
  if (check_utf8 && IsStringLike(to_type.id) && !IsStringLike(data->type->id)) {
    FERRY_RETURN_NOT_OK(ValidateFull(*out));
  }
  return ArrayDataPtr(out);
}

}  // namespace ferry
