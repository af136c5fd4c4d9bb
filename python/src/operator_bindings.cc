// Python bindings of the dataflow operator API (filled in with the operator API).
#include "objects.h"

namespace ferry::python {
void BindOperators(py::module_& flow) { (void)flow; }
}  // namespace ferry::python
