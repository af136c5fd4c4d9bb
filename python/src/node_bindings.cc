// Python bindings of the dataflow node API (filled in with the node API).
#include "objects.h"

namespace ferry::python {
void BindNode(py::module_& flow) { (void)flow; }
}  // namespace ferry::python
